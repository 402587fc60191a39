"""Prompts for reinforcement learning (GRPO), with the columns the rewards read."""
