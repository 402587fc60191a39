"""GSPO and RLOO against TRL's own code on the same tensors (GRPOTrainer._compute_loss at
``importance_sampling_level='sequence'``, RLOOTrainer._compute_loss and its advantage block), GSPO-token's
equivalence to GSPO, and dynamic sampling's filling of groups."""

from __future__ import annotations

import copy
import inspect
import math
from collections import defaultdict
from contextlib import nullcontext
from types import SimpleNamespace

import pytest
import torch

from honing.losses import combine_rewards, grpo_loss_scale, grpo_per_token_loss
from honing.methods.grpo import GRPOTrainModule
from honing.methods.grpo_estimators import rloo_advantages
from honing.methods.grpo_loss_stats import LossStats
from honing.methods.grpo_sampling import GeneratedGroups, equal_reward_groups, fill_groups
from honing.methods.rloo import RLOOTrainModule
from tests.helpers import tiny_llama
from tests.methods.rollout_module import rollout_module
from tests.methods.test_grpo import MAX_COMPLETION_LENGTH, TEMPERATURE, rewards_table, rollouts, trl_trainer

trl = pytest.importorskip("trl")
from trl import RLOOTrainer  # noqa: E402
from trl.trainer.utils import add_fused_lm_head  # noqa: E402
from trl.trainer.utils import nanstd as trl_nanstd  # noqa: E402


def module(model, cls=GRPOTrainModule, micro_batch_size=2, **settings):
    """A train module over ``model`` scoring nothing (the tests hand it rollouts)."""
    return rollout_module(
        model,
        torch.optim.SGD(model.parameters(), lr=0.0),
        cls,
        num_generations=4,
        max_completion_length=MAX_COMPLETION_LENGTH,
        temperature=TEMPERATURE,
        micro_batch_size=micro_batch_size,
        **settings,
    )


def batch_of(prompt_ids, prompt_mask, completion_ids, completion_mask, advantages):
    return {
        "input_ids": torch.cat([prompt_ids, completion_ids], dim=1),
        "attention_mask": torch.cat([prompt_mask, completion_mask], dim=1),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": advantages,
    }


def trl_inputs(prompt_ids, prompt_mask, completion_ids, completion_mask, advantages):
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": advantages,
        "num_items_in_batch": completion_mask.sum(),
    }


def assert_same_gradients(model, trl_model):
    trl_params = dict(trl_model.named_parameters())
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, trl_params[name].grad, rtol=1e-4, atol=1e-6, msg=name)


# --- GSPO: TRL's GRPOTrainer at importance_sampling_level="sequence" ------------------------------------------------
@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_gspo_loss_and_gradients_equal_trl_off_policy(loss_type, beta):
    tensors = rollouts()
    prompt_ids, prompt_mask, completion_ids, completion_mask, advantages = tensors
    model, reference = tiny_llama(seed=3), tiny_llama(seed=4)
    trl_model, trl_reference = copy.deepcopy(model), copy.deepcopy(reference)
    add_fused_lm_head(trl_model, temperature=TEMPERATURE, outputs=("log_probs", "entropy"))
    add_fused_lm_head(trl_reference, temperature=TEMPERATURE)
    trainer = trl_trainer(trl_model, loss_type=loss_type, beta=beta, epsilon=0.2, epsilon_high=0.28, accumulation=1)
    trainer.importance_sampling_level = "sequence"
    ours = module(
        model, loss_type=loss_type, beta=beta, epsilon=0.2, epsilon_high=0.28, importance_sampling_level="sequence"
    )
    ours.logps.reference_model = reference
    batch = batch_of(*tensors)
    # an older policy that sampled: ratios away from 1, some of them clipped on either side
    with torch.no_grad():
        old = ours.logps(model, batch) + 0.3 * torch.randn(completion_ids.shape, generator=gen(5))
    inputs = trl_inputs(*tensors)
    inputs["old_per_token_logps"] = old
    if beta:
        batch["ref_logps"] = ours.logps.reference(ours.model, batch)
        inputs["ref_per_token_logps"] = batch["ref_logps"]
    trl_loss = trainer._compute_loss(trl_model, inputs)
    trl_loss.backward()

    stats = LossStats()
    scale = grpo_loss_scale(
        loss_type, sequences=8, tokens=completion_mask.sum(), micro_batches=1, max_completion_length=12
    )
    loss = ours.micro_loss({**batch, "old_logps": old}, stats) * scale
    loss.backward()
    assert loss.item() == pytest.approx(trl_loss.item(), abs=1e-6)
    assert_same_gradients(model, trl_model)
    # TRL's sequence-level clip fractions count sequences
    metrics = trainer._metrics["train"]
    sums = stats.sums()
    assert (sums[2] / sums[5]).item() == pytest.approx(metrics["clip_ratio/low_mean"][0], abs=1e-6)
    assert (sums[3] / sums[5]).item() == pytest.approx(metrics["clip_ratio/high_mean"][0], abs=1e-6)
    assert metrics["clip_ratio/region_mean"][0] > 0  # the test clips something


@pytest.mark.parametrize("micro_batches", [1, 2])
def test_gspo_step_equals_trl_over_micro_batches(micro_batches):
    tensors = rollouts()
    prompt_ids, prompt_mask, completion_ids, completion_mask, advantages = tensors
    model = tiny_llama(seed=3)
    trl_model = copy.deepcopy(model)
    add_fused_lm_head(trl_model, temperature=TEMPERATURE, outputs=("log_probs", "entropy"))
    trainer = trl_trainer(trl_model, loss_type="grpo", beta=0.0, epsilon=0.2, epsilon_high=0.2, accumulation=1)
    trainer.importance_sampling_level = "sequence"
    trainer.current_gradient_accumulation_steps = micro_batches
    rows = len(prompt_ids) // micro_batches
    trl_loss = 0.0
    for start in range(0, len(prompt_ids), rows):
        part = slice(start, start + rows)
        loss = trainer._compute_loss(trl_model, trl_inputs(*(t[part] for t in tensors)))
        loss.backward()
        trl_loss += loss.item()
    ours = module(model, micro_batch_size=rows // 4, loss_type="grpo", importance_sampling_level="sequence")
    ours.learn(batch_of(*tensors))
    assert ours._step_loss.item() == pytest.approx(trl_loss, abs=1e-6)
    assert_same_gradients(model, trl_model)


def gen(seed):
    return torch.Generator().manual_seed(seed)


def test_gspo_token_has_gspos_value_and_gradient_for_one_advantage_per_sequence():
    # the GSPO paper: with the same advantage on every token of a completion, GSPO-token is GSPO
    logps = torch.randn(4, 6, generator=gen(0)).requires_grad_()
    old = logps.detach() + 0.2 * torch.randn(4, 6, generator=gen(1))
    mask = torch.tensor([[1] * 6, [1] * 2 + [0] * 4, [1] * 5 + [0], [1] * 3 + [0] * 3])
    advantages = torch.tensor([1.0, -0.5, 2.0, -1.5])
    results = {}
    for level in ("sequence", "sequence_token"):
        loss, ratio, _ = grpo_per_token_loss(logps, old, advantages, mask=mask, level=level, epsilon=0.1)
        total = ((loss * mask).sum(-1) / mask.sum(-1)).sum()
        (grad,) = torch.autograd.grad(total, logps)
        results[level] = (ratio.detach().expand(4, 6), total.detach(), grad)
    for seq, tok in zip(results["sequence"], results["sequence_token"]):
        torch.testing.assert_close(seq, tok, rtol=0, atol=1e-6)
    assert results["sequence"][2].abs().sum() > 0


# --- RLOO: TRL's RLOOTrainer ----------------------------------------------------------------------------------------
def trl_rloo_advantages(rewards_per_func, weights, num_generations, normalize, kl=None, beta=0.0):
    """RLOOTrainer._generate_and_score_completions's reward and advantage block, as written there (checked below
    against its source)."""
    unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)
    rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
    rewards[unscorable_mask] = torch.nan
    if beta != 0.0:
        rewards = rewards - beta * kl
    grouped_rewards = rewards.view(-1, num_generations)
    scorable_counts = (~torch.isnan(grouped_rewards)).sum(dim=1, keepdim=True)
    grouped_sum = torch.nansum(grouped_rewards, dim=1, keepdim=True)
    baselines = (grouped_sum - grouped_rewards) / (scorable_counts - 1)
    baselines = baselines.view(-1)
    advantages = rewards - baselines
    if normalize:
        advantages = (advantages - torch.nanmean(advantages)) / (trl_nanstd(advantages) + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0)


def test_the_transcribed_rloo_block_is_trls():
    source = inspect.getsource(RLOOTrainer._generate_and_score_completions)
    for line in (
        "baselines = (grouped_sum - grouped_rewards) / (scorable_counts - 1)",
        "advantages = (advantages - torch.nanmean(advantages)) / (nanstd(advantages) + 1e-4)",
        "per_token_kl = old_per_token_logps - ref_per_token_logps",
        "kl = (per_token_kl * completion_mask).sum(-1)",
        "rewards = rewards - self.beta * kl",
    ):
        assert line in source, line


@pytest.mark.parametrize("normalize", [False, True])
def test_rloo_advantages_equal_trl(normalize):
    rewards_per_func, weights = rewards_table()
    ours, _ = rloo_advantages(combine_rewards(rewards_per_func, weights), 4, normalize)
    expected = trl_rloo_advantages(rewards_per_func, weights, 4, normalize)
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-6)
    assert ours[3] == 0.0  # no reward applied: no advantage
    if not normalize:
        assert torch.all(ours[4:8] == 0.0)  # equal rewards: the leave-one-out baseline is each one's own reward
        # a completion's advantage is G/(G-1) times its distance from the group mean
        rewards = combine_rewards(rewards_per_func, weights)[8:12]
        torch.testing.assert_close(ours[8:12], (rewards - rewards.nanmean()) * 4 / 3, rtol=0, atol=1e-6)


def test_rloo_kl_in_the_reward_equals_trl():
    tensors = rollouts()
    model, reference = tiny_llama(seed=3), tiny_llama(seed=4)
    trl_model, trl_reference = copy.deepcopy(model), copy.deepcopy(reference)
    add_fused_lm_head(trl_model, temperature=TEMPERATURE)
    add_fused_lm_head(trl_reference, temperature=TEMPERATURE)
    stand_in = SimpleNamespace(accelerator=SimpleNamespace(autocast=nullcontext, is_main_process=True))
    batch = batch_of(*tensors)
    with torch.no_grad():
        width = tensors[2].size(1)
        policy, _, _ = RLOOTrainer._get_per_token_logps_and_entropies(
            stand_in, trl_model, batch["input_ids"], batch["attention_mask"], width
        )
        ref, _, _ = RLOOTrainer._get_per_token_logps_and_entropies(
            stand_in, trl_reference, batch["input_ids"], batch["attention_mask"], width
        )
    kl = ((policy - ref) * tensors[3]).sum(-1)
    rewards_per_func = torch.rand(8, 1, generator=gen(2)).round()
    expected = trl_rloo_advantages(rewards_per_func, torch.ones(1), 4, False, kl=kl, beta=0.05)

    ours = module(model, RLOOTrainModule, beta=0.05, reference_model=reference)
    del batch["advantages"]
    advantages, _ = ours.score_rollouts(combine_rewards(rewards_per_func, torch.ones(1)), batch)
    torch.testing.assert_close(advantages, expected, rtol=0, atol=1e-6)
    assert "ref_logps" not in batch  # the loss holds no KL term


def trl_rloo(model, *, epsilon, epsilon_high):
    """An RLOOTrainer with only what ``_compute_loss`` reads."""
    trainer = RLOOTrainer.__new__(RLOOTrainer)
    values = dict(
        model=model,
        aux_loss_enabled=False,
        epsilon_low=epsilon,
        epsilon_high=epsilon_high,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        accelerator=SimpleNamespace(
            autocast=nullcontext, is_main_process=True, reduce=lambda t, reduction: t, gather=lambda t: t
        ),
    )
    for name, value in values.items():
        object.__setattr__(trainer, name, value)
    return trainer


@pytest.mark.parametrize("micro_batches", [1, 2])
@pytest.mark.parametrize("off_policy", [False, True])
def test_rloo_loss_and_gradients_equal_trl(micro_batches, off_policy):
    tensors = rollouts()
    prompt_ids, prompt_mask, completion_ids, completion_mask, advantages = tensors
    model = tiny_llama(seed=3)
    trl_model = copy.deepcopy(model)
    add_fused_lm_head(trl_model, temperature=TEMPERATURE, outputs=("log_probs", "entropy"))
    trainer = trl_rloo(trl_model, epsilon=0.2, epsilon_high=0.28)
    ours = module(model, RLOOTrainModule, micro_batch_size=len(prompt_ids) // micro_batches // 4, epsilon_high=0.28)
    batch = batch_of(*tensors)
    with torch.no_grad():
        old = ours.logps(model, batch)
    if off_policy:
        old = old + 0.15 * torch.randn(old.shape, generator=gen(7))
    rows = len(prompt_ids) // micro_batches
    trl_loss = 0.0
    for start in range(0, len(prompt_ids), rows):
        part = slice(start, start + rows)
        inputs = trl_inputs(*(t[part] for t in tensors))
        inputs["old_logps"] = (old[part] * completion_mask[part]).sum(1)
        loss = trainer._compute_loss(trl_model, inputs) / micro_batches  # the HF Trainer divides by accumulation
        loss.backward()
        trl_loss += loss.item()

    if off_policy:  # the old policy's log-probs reach the loss as they do after a first pass
        stats = LossStats()
        loss = sum(ours.micro_loss({**micro, "old_logps": o}, stats) for micro, o in zip_micro(ours, batch, old))
        (loss / len(prompt_ids)).backward()
        assert (loss / len(prompt_ids)).item() == pytest.approx(trl_loss, abs=1e-6)
        assert stats.sums()[4] > 0  # something is clipped
    else:
        ours.learn(batch)
        assert ours._step_loss.item() == pytest.approx(trl_loss, abs=1e-6)
    assert_same_gradients(model, trl_model)


def zip_micro(train_module, batch, old):
    micros = train_module.logps.micro_rollouts(batch)
    width = len(micros[0]["completion_mask"])
    return [(micro, old[i * width : (i + 1) * width]) for i, micro in enumerate(micros)]


# --- dynamic sampling -----------------------------------------------------------------------------------------------
def test_equal_reward_groups():
    nan = math.nan
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, nan, 2.0, nan, nan, nan, 2.0, 2.0, 3.0])
    assert equal_reward_groups(rewards, 4).tolist() == [True, False, True, False]


def groups(rewards, first_index=0, width=3):
    """Fake generated groups of G = 2 with the given rewards, prompts numbered from ``first_index``."""
    rows = len(rewards)
    return GeneratedGroups(
        prompt_ids=torch.full((rows, width), 5),
        prompt_mask=torch.ones(rows, width, dtype=torch.long),
        completion_ids=torch.full((rows, 2), 6),
        completion_mask=torch.ones(rows, 2, dtype=torch.long),
        prompts=[f"p{first_index + r // 2}" for r in range(rows)],
        texts=[f"t{r}" for r in range(rows)],
        columns={"answer": [first_index + r // 2 for r in range(rows)]},
        rewards_per_func=torch.tensor(rewards).unsqueeze(1),
        num_generations=2,
    )


def test_fill_groups_drops_equal_groups_refills_and_stops_at_the_limit():
    asked = []

    def refill(round_index, count):
        asked.append((round_index, count))
        # round 1: one useful group of two; round 2: all useful (wider prompts, re-padded)
        rewards = [0.0, 0.0, 1.0, 0.0] if round_index == 1 else [1.0, 2.0] * count
        return groups(rewards[: 2 * count], first_index=10 * round_index, width=5)

    first = groups([1.0, 1.0, 0.0, 1.0, 3.0, 3.0, 0.0, 0.0])  # groups 0, 2, 3 equal
    filled, counts = fill_groups(
        first, weights=torch.ones(1), max_rounds=5, refill=refill, shortage_everywhere=lambda n: n, pad_token_id=0
    )
    assert asked == [(1, 3), (2, 2)]
    assert counts.rounds == 3 and counts.dropped_groups == 4 and counts.equal_groups_kept == 0
    assert counts.refill_prompts == 5
    assert filled.prompts[::2] == ["p1", "p11", "p20", "p21"]
    assert filled.prompt_ids.shape == (8, 5) and filled.prompt_mask[:2, :2].sum() == 0  # left-padded
    assert not equal_reward_groups(combine_rewards(filled.rewards_per_func, torch.ones(1)), 2).any()

    asked.clear()
    filled, counts = fill_groups(
        first, weights=torch.ones(1), max_rounds=2, refill=refill, shortage_everywhere=lambda n: n, pad_token_id=0
    )
    assert asked == [(1, 3)] and counts.rounds == 2  # the limit: two rounds in all
    assert counts.equal_groups_kept == 2 and counts.dropped_groups == 2  # of the 4 equal groups, 2 fill the step
    assert filled.prompts[::2] == ["p1", "p11", "p0", "p2"]  # the useful ones, then the earliest dropped


def test_fill_groups_keeps_a_batch_without_equal_groups_as_it_is():
    first = groups([1.0, 0.0, 2.0, 3.0])
    filled, counts = fill_groups(
        first, weights=torch.ones(1), max_rounds=3, refill=None, shortage_everywhere=lambda n: n, pad_token_id=0
    )
    assert counts.rounds == 1 and counts.dropped_groups == 0
    assert filled.prompts == first.prompts and torch.equal(filled.prompt_ids, first.prompt_ids)
