"""Preference pairs for DPO: the formats users bring, and pairs as tokens and batches."""
