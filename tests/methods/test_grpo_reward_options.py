"""GRPO's reward and masking options against TRL's GRPOTrainer._generate_and_score_completions (its blocks transcribed
below, checked against its installed source): GDPO's ``normalize_then_sum`` aggregation and
``mask_truncated_completions``."""

from __future__ import annotations

import inspect

import pytest
import torch

from honing.losses import group_advantages, normalized_reward_sum
from honing.methods.grpo_metrics import ended_rows
from honing.methods.grpo_sampling import mask_truncated
from tests.helpers import tiny_llama
from tests.methods.test_grpo import rewards_table, rollouts
from tests.methods.test_grpo_estimators import module

trl = pytest.importorskip("trl")
from trl import GRPOTrainer  # noqa: E402
from trl.trainer.utils import nanstd  # noqa: E402

STOP = 1


def trl_normalize_then_sum(rewards_per_func, reward_weights, num_generations):
    """The ``normalize_then_sum`` block, as written there (with its unscorable rows)."""
    unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)
    grouped = rewards_per_func.view(-1, num_generations, rewards_per_func.shape[1])
    mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
    std_k = nanstd(grouped, dim=1, keepdim=True) if num_generations > 1 else torch.zeros_like(mean_k)
    reward_k = (grouped - mean_k) / (std_k + 1e-4)
    reward_k = reward_k.view(-1, rewards_per_func.shape[1])
    rewards = (reward_k * reward_weights.unsqueeze(0)).nansum(dim=1)
    rewards[unscorable_mask] = torch.nan
    std_rewards = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
    advantages = (rewards - torch.nanmean(rewards)) / (std_rewards + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0)


def trl_truncated(completion_ids_list, eos_and_pad):
    """The ``mask_truncated_completions`` test, as written there."""
    return torch.tensor([ids[-1] not in eos_and_pad for ids in completion_ids_list])


def test_the_transcribed_blocks_are_trls():
    source = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    for line in (
        "std_k = nanstd(grouped, dim=1, keepdim=True) if num_generations > 1 else torch.zeros_like(mean_k)",
        "reward_k = (grouped - mean_k) / (std_k + 1e-4)",
        "rewards = (reward_k * self.reward_weights.to(device).unsqueeze(0)).nansum(dim=1)",
        "std_rewards = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)",
        "advantages = (rewards - torch.nanmean(rewards)) / (std_rewards + 1e-4)",
        "is_truncated = torch.tensor([ids[-1] not in eos_and_pad for ids in completion_ids_list], device=device)",
        "completion_mask = completion_mask * (~is_truncated).unsqueeze(1).int()",
    ):
        assert line in source, line


def test_normalize_then_sum_equals_trl():
    rewards_per_func, weights = rewards_table()
    expected = trl_normalize_then_sum(rewards_per_func, weights, 4)
    summed = normalized_reward_sum(rewards_per_func, weights, 4)
    ours, _ = group_advantages(summed, len(summed), "group")  # the whole batch as one group
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-6)
    assert ours[3] == 0.0  # no reward applied: no advantage
    # the train module's own path: the same advantages
    grpo = module(tiny_llama(seed=3), multi_objective_aggregation="normalize_then_sum")
    rollouts = {}
    advantages, _ = grpo.score_rollouts(summed, rollouts)
    assert torch.equal(rollouts["advantages"], advantages)
    torch.testing.assert_close(advantages, expected, rtol=0, atol=1e-6)


def test_truncated_completions_get_no_loss_and_no_attention():
    prompt_ids, prompt_mask, completion_ids, completion_mask, _ = rollouts()
    ended = [0, 2, 5]  # rows whose completion ends on the stop token
    for row in ended:
        completion_ids[row, int(completion_mask[row].sum()) - 1] = STOP
    width = completion_ids.shape[1]
    batch = {
        "input_ids": torch.cat([prompt_ids, completion_ids], dim=1),
        "attention_mask": torch.cat([prompt_mask, completion_mask], dim=1),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask.clone(),
    }
    mask_truncated(batch, ended_rows(completion_ids, completion_mask, [STOP]))

    lists = [ids[mask.bool()].tolist() for ids, mask in zip(completion_ids, completion_mask)]
    truncated = trl_truncated(lists, [STOP, 0])
    assert truncated.tolist() == [row not in ended for row in range(len(lists))]
    torch.testing.assert_close(batch["completion_mask"], completion_mask * (~truncated).unsqueeze(1).int())
    torch.testing.assert_close(batch["attention_mask"][:, -width:], batch["completion_mask"])
    torch.testing.assert_close(batch["attention_mask"][:, :-width], prompt_mask)  # prompts untouched
