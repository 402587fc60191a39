"""Conversations as tokens: chat templates, assistant-only loss masks, padded and packed rows."""
