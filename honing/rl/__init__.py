"""Reinforcement learning from rewards: the reward registry and its built-in rewards."""

from honing.rl.rewards import REWARDS, RewardScorer, completion_text, register_reward, resolve_reward

__all__ = ["REWARDS", "RewardScorer", "completion_text", "register_reward", "resolve_reward"]
