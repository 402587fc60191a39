"""GRPO against TRL's own GRPOTrainer code: advantages, the loss of every loss_type (with and without a KL term),
its gradients, and the split into micro-batches; plus the train module's rollouts."""

from __future__ import annotations

import copy
import math
from collections import defaultdict
from contextlib import nullcontext
from types import SimpleNamespace

import pytest
import torch

from honing.losses import combine_rewards, group_advantages, grpo_loss_scale, nanstd
from honing.methods.grpo import rollout_seed
from tests.helpers import tiny_llama
from tests.methods.rollout_module import rollout_module

trl = pytest.importorskip("trl")
from trl import GRPOTrainer  # noqa: E402
from trl.trainer.utils import add_fused_lm_head  # noqa: E402
from trl.trainer.utils import nanstd as trl_nanstd  # noqa: E402

TEMPERATURE = 0.7
MAX_COMPLETION_LENGTH = 12
PAD = 0


def trl_advantages(rewards_per_func, weights, num_generations, scale_rewards):
    """TRL's GRPOTrainer._generate_and_score_completions advantage block (sum_then_normalize), as written there."""
    unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)
    rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
    rewards[unscorable_mask] = torch.nan
    mean_grouped_rewards = torch.nanmean(rewards.view(-1, num_generations), dim=1)
    mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(num_generations, dim=0)
    if scale_rewards in ["group", "none"]:
        std_rewards = trl_nanstd(rewards.view(-1, num_generations), dim=1)
        std_rewards = std_rewards.repeat_interleave(num_generations, dim=0)
    else:
        std_rewards = trl_nanstd(rewards).expand_as(rewards)
    advantages = rewards - mean_grouped_rewards
    if scale_rewards != "none":
        advantages = advantages / (std_rewards + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0)


def rewards_table():
    # 3 prompts x 4 generations, 2 reward functions; None (NaN) where a reward does not apply, one completion
    # no reward applies to, and one group whose rewards are all equal
    nan = math.nan
    first = [1.0, 0.0, 0.5, nan, 2.0, 2.0, 2.0, 2.0, 0.3, -1.0, nan, 0.7]
    second = [0.2, nan, 0.1, nan, 0.0, 0.0, 0.0, 0.0, 1.0, 0.5, 0.25, nan]
    return torch.tensor([first, second]).T, torch.tensor([1.0, 0.5])


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_advantages_equal_trl(scale_rewards):
    rewards_per_func, weights = rewards_table()
    rewards = combine_rewards(rewards_per_func, weights)
    ours, _ = group_advantages(rewards, 4, scale_rewards)
    expected = trl_advantages(rewards_per_func, weights, 4, scale_rewards)
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-6)
    assert ours[3] == 0.0  # no reward applied: no advantage
    if scale_rewards != "none":
        assert torch.all(ours[4:8] == 0.0)  # a group of equal rewards teaches nothing


def test_nanstd_is_bessel_corrected():
    values = torch.tensor([1.0, 2.0, math.nan, 4.0])
    assert nanstd(values).item() == pytest.approx(
        math.sqrt(((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 2)
    )


def rollouts(num_prompts=2, group=4, seed=0):
    """Left-padded prompts and right-padded completions of different lengths, as honing and TRL lay them out."""
    generator = torch.Generator().manual_seed(seed)
    rows = num_prompts * group
    prompt_lengths = [3, 5, 2, 5, 4, 1, 5, 3][:rows]
    width = max(prompt_lengths)
    prompt_ids = torch.full((rows, width), PAD)
    prompt_mask = torch.zeros((rows, width), dtype=torch.long)
    for row, length in enumerate(prompt_lengths):
        prompt_ids[row, width - length :] = torch.randint(1, 64, (length,), generator=generator)
        prompt_mask[row, width - length :] = 1
    completion_lengths = [6, 1, 4, 6, 2, 5, 6, 3][:rows]
    completion_ids = torch.full((rows, 6), PAD)
    completion_mask = torch.zeros((rows, 6), dtype=torch.long)
    for row, length in enumerate(completion_lengths):
        completion_ids[row, :length] = torch.randint(1, 64, (length,), generator=generator)
        completion_mask[row, :length] = 1
    advantages = torch.randn(rows, generator=generator)
    return prompt_ids, prompt_mask, completion_ids, completion_mask, advantages


def trl_trainer(model, *, loss_type, beta, epsilon, epsilon_high, accumulation):
    """A GRPOTrainer with only what ``_compute_loss`` reads (no dataset, no accelerate run)."""
    trainer = GRPOTrainer.__new__(GRPOTrainer)
    values = dict(
        model=model,
        aux_loss_enabled=False,
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level="token",
        beta=beta,
        loss_type=loss_type,
        epsilon_low=epsilon,
        epsilon_high=epsilon_high,
        use_vllm=False,
        vllm_importance_sampling_correction=False,
        max_completion_length=MAX_COMPLETION_LENGTH,
        current_gradient_accumulation_steps=accumulation,
        _entropy_bonus_enabled=False,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        args=SimpleNamespace(use_bias_correction_kl=True, delta=None, steps_per_generation=accumulation),
        accelerator=SimpleNamespace(
            autocast=nullcontext,
            num_processes=1,
            is_main_process=True,
            reduce=lambda t, reduction: t,
            gather=lambda t: t,
        ),
    )
    for name, value in values.items():
        object.__setattr__(trainer, name, value)
    return trainer


def honing_module(model, *, loss_type, beta, epsilon, epsilon_high, micro_batch_size, micro_batch_completions=None):
    return rollout_module(
        model,
        torch.optim.SGD(model.parameters(), lr=0.0),
        num_generations=4,
        max_completion_length=MAX_COMPLETION_LENGTH,
        temperature=TEMPERATURE,
        beta=beta,
        epsilon=epsilon,
        epsilon_high=epsilon_high,
        loss_type=loss_type,
        micro_batch_size=micro_batch_size,
        micro_batch_completions=micro_batch_completions,
    )


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("micro_batches", [1, 2, 4])  # 4: micro-batches of 2 completions, each group spans two
def test_loss_and_gradients_equal_trl(loss_type, beta, micro_batches):
    prompt_ids, prompt_mask, completion_ids, completion_mask, advantages = rollouts()
    epsilon, epsilon_high = 0.2, 0.28
    model = tiny_llama(seed=3)
    reference = tiny_llama(seed=4)  # a reference that differs, so the KL term is not zero
    trl_model = copy.deepcopy(model)
    trl_reference = copy.deepcopy(reference)
    add_fused_lm_head(trl_model, temperature=TEMPERATURE, outputs=("log_probs", "entropy"))
    add_fused_lm_head(trl_reference, temperature=TEMPERATURE)

    # TRL: the reference log-probs as _generate_and_score_completions computes them, then _compute_loss on each
    # micro-batch (its gradient-accumulation steps), summed as the HF Trainer's backward passes add up
    trainer = trl_trainer(
        trl_model,
        loss_type=loss_type,
        beta=beta,
        epsilon=epsilon,
        epsilon_high=epsilon_high,
        accumulation=micro_batches,
    )
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
    with torch.no_grad():
        ref_logps, _, _ = trainer._get_per_token_logps_and_entropies(
            trl_reference, input_ids, attention_mask, completion_ids.size(1)
        )
    rows = len(prompt_ids) // micro_batches
    trl_loss = 0.0
    for start in range(0, len(prompt_ids), rows):
        part = slice(start, start + rows)
        inputs = {
            "prompt_ids": prompt_ids[part],
            "prompt_mask": prompt_mask[part],
            "completion_ids": completion_ids[part],
            "completion_mask": completion_mask[part],
            "advantages": advantages[part],
            "num_items_in_batch": completion_mask.sum(),
        }
        if beta:
            inputs["ref_per_token_logps"] = ref_logps[part]
        loss = trainer._compute_loss(trl_model, inputs)
        loss.backward()
        trl_loss += loss.item()

    module = honing_module(
        model,
        loss_type=loss_type,
        beta=beta,
        epsilon=epsilon,
        epsilon_high=epsilon_high,
        micro_batch_size=max(rows // 4, 1),
        micro_batch_completions=rows if rows % 4 else None,  # TRL's per_device_train_batch_size below G
    )
    module.logps.reference_model = reference
    batch = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": advantages,
    }
    if beta:
        batch["ref_logps"] = module.logps.reference(model, batch)
        real = completion_mask.bool()  # TRL leaves 0 at the padding after a completion
        torch.testing.assert_close(batch["ref_logps"][real], ref_logps[real], rtol=0, atol=1e-5)
    module.learn(batch)
    assert module._step_loss.item() == pytest.approx(trl_loss, abs=1e-5)
    trl_params = dict(trl_model.named_parameters())
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, trl_params[name].grad, rtol=1e-4, atol=1e-6, msg=name)


def test_loss_scale_per_loss_type():
    assert grpo_loss_scale("grpo", sequences=8, tokens=30, micro_batches=2, max_completion_length=12) == 1 / 8
    assert grpo_loss_scale("bnpo", sequences=8, tokens=30, micro_batches=2, max_completion_length=12) == 1 / 2
    assert grpo_loss_scale("dr_grpo", sequences=8, tokens=30, micro_batches=2, max_completion_length=12) == 1 / 96
    assert grpo_loss_scale("dapo", sequences=8, tokens=30, micro_batches=2, max_completion_length=12) == 1 / 30
    # two ranks averaging gradients: global counts, times the world size
    assert (
        grpo_loss_scale("dapo", sequences=16, tokens=60, micro_batches=2, max_completion_length=12, world_size=2)
        == 2 / 60
    )


def test_rollout_seed_depends_on_every_part():
    seeds = {rollout_seed(0, 1, 2, 3), rollout_seed(1, 1, 2, 3), rollout_seed(0, 2, 2, 3)}
    seeds |= {rollout_seed(0, 1, 3, 3), rollout_seed(0, 1, 2, 4)}
    assert len(seeds) == 5
    assert rollout_seed(0, 1, 2, 3) == rollout_seed(0, 1, 2, 3)
