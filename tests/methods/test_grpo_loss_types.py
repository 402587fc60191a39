"""TRL 1.16's newer GRPO losses against its own GRPOTrainer._compute_loss on the same tensors: cispo, sapo, luspo and
vespo (with their extra keys), two-sided clipping (``delta``) and ``top_entropy_quantile``, off the policy that
sampled (ratios away from 1) and over micro-batches; their metrics under TRL's names."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

from honing.losses import grpo_loss_scale
from honing.methods.grpo_loss_stats import LossStats
from tests.helpers import tiny_llama
from tests.methods.test_grpo import TEMPERATURE, rollouts, trl_trainer
from tests.methods.test_grpo_estimators import assert_same_gradients, batch_of, gen, module, trl_inputs

trl = pytest.importorskip("trl")
from trl.trainer.utils import add_fused_lm_head  # noqa: E402

# every extra key away from TRL's default, so that a key not passed on would show
LOSS_KEYS = dict(
    delta=1.1,
    sapo_temperature_pos=1.3,
    sapo_temperature_neg=0.8,
    vespo_k_pos=1.5,
    vespo_lambda_pos=2.5,
    vespo_k_neg=2.5,
    vespo_lambda_neg=1.5,
)
# (loss_type, importance_sampling_level, epsilon_high, the keys set): CISPO's epsilon_high is its ε_max
CASES = {
    "cispo": ("cispo", "token", 1.2, ()),
    "cispo_sequence": ("cispo", "sequence", 1.05, ()),
    "sapo": ("sapo", "token", 0.28, ("sapo_temperature_pos", "sapo_temperature_neg")),
    "luspo": ("luspo", "sequence", 0.28, ()),
    "vespo": ("vespo", "token", 0.28, ("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg")),
    "dapo_delta": ("dapo", "token", 0.28, ("delta",)),
    "grpo_delta_sequence": ("grpo", "sequence", 0.28, ("delta",)),
}


def trainers(case, beta, top_entropy_quantile=1.0, accumulation=1):
    """(honing's module, its model, TRL's trainer, its model) for ``case``, from the same weights."""
    loss_type, level, epsilon_high, keys = CASES[case]
    model, reference = tiny_llama(seed=3), tiny_llama(seed=4)
    trl_model, trl_reference = copy.deepcopy(model), copy.deepcopy(reference)
    add_fused_lm_head(trl_model, temperature=TEMPERATURE, outputs=("log_probs", "entropy"))
    add_fused_lm_head(trl_reference, temperature=TEMPERATURE)
    trainer = trl_trainer(
        trl_model, loss_type=loss_type, beta=beta, epsilon=0.2, epsilon_high=epsilon_high, accumulation=accumulation
    )
    trl_defaults = dict(delta=None, sapo_temperature_pos=1.0, sapo_temperature_neg=1.05)
    trl_defaults.update(vespo_k_pos=2.0, vespo_lambda_pos=3.0, vespo_k_neg=3.0, vespo_lambda_neg=2.0)
    options = {key: LOSS_KEYS[key] for key in keys}
    trainer.args = SimpleNamespace(**{**vars(trainer.args), **trl_defaults, **options})
    trainer.importance_sampling_level = level
    trainer.top_entropy_quantile = top_entropy_quantile
    trainer.accelerator.pad_across_processes = lambda tensor, dim, pad_index: tensor
    ours = module(
        model,
        loss_type=loss_type,
        importance_sampling_level=level,
        beta=beta,
        epsilon=0.2,
        epsilon_high=epsilon_high,
        **options,
        top_entropy_quantile=top_entropy_quantile,
        reference_model=reference,
    )
    return ours, model, trainer, trl_model


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_loss_and_gradients_equal_trl_off_policy(case, beta):
    tensors = rollouts()
    ours, model, trainer, trl_model = trainers(case, beta)
    batch = batch_of(*tensors)
    with torch.no_grad():  # an older policy that sampled: ratios away from 1
        old = ours.logps(model, batch) + 0.3 * torch.randn(tensors[2].shape, generator=gen(5))
    inputs = {**trl_inputs(*tensors), "old_per_token_logps": old}
    if beta:
        batch["ref_logps"] = ours.logps.reference(ours.model, batch)
        inputs["ref_per_token_logps"] = batch["ref_logps"]
    trl_loss = trainer._compute_loss(trl_model, inputs)
    trl_loss.backward()

    stats = LossStats()
    loss_type = CASES[case][0]
    scale = grpo_loss_scale(loss_type, sequences=8, tokens=tensors[3].sum(), micro_batches=1, max_completion_length=12)
    loss = ours.micro_loss({**batch, "old_logps": old}, stats) * scale
    loss.backward()
    assert loss.item() == pytest.approx(trl_loss.item(), abs=1e-6)
    assert trl_loss.abs().item() > 1e-3  # not a vanishing loss
    assert_same_gradients(model, trl_model)

    metrics, sums = trainer._metrics["train"], stats.sums()
    if loss_type == "cispo":
        assert stats.metric[0] / stats.metric[1] == pytest.approx(metrics["cispo_clip_ratio"][0], abs=1e-6)
        assert metrics["cispo_clip_ratio"][0] > 0  # the test clips something
    elif loss_type == "vespo":
        assert stats.metric[0] / stats.metric[1] == pytest.approx(metrics["vespo/phi_seq_mean"][0], abs=1e-6)
    elif loss_type != "sapo":
        assert (sums[2] / sums[5]).item() == pytest.approx(metrics["clip_ratio/low_mean"][0], abs=1e-6)
        assert (sums[3] / sums[5]).item() == pytest.approx(metrics["clip_ratio/high_mean"][0], abs=1e-6)


@pytest.mark.parametrize("case", ["cispo", "sapo", "luspo", "vespo"])
@pytest.mark.parametrize("micro_batches", [1, 2])
def test_step_equals_trl_over_micro_batches(case, micro_batches):
    tensors = rollouts()
    ours, model, trainer, trl_model = trainers(case, 0.04, accumulation=micro_batches)
    rows = len(tensors[0]) // micro_batches
    ours.micro_batch_size = rows // 4
    batch = batch_of(*tensors)
    batch["ref_logps"] = ours.logps.reference(ours.model, batch)
    trl_loss = 0.0
    for start in range(0, len(tensors[0]), rows):
        part = slice(start, start + rows)
        inputs = trl_inputs(*(t[part] for t in tensors))
        inputs.update(num_items_in_batch=tensors[3].sum(), ref_per_token_logps=batch["ref_logps"][part])
        loss = trainer._compute_loss(trl_model, inputs)
        loss.backward()
        trl_loss += loss.item()
    ours.learn(batch)
    assert ours._step_loss.item() == pytest.approx(trl_loss, abs=1e-6)
    assert_same_gradients(model, trl_model)


@pytest.mark.parametrize("quantile", [0.0, 0.3])
@pytest.mark.parametrize("case", ["dapo_delta", "sapo"])
def test_top_entropy_quantile_equals_trl(quantile, case):
    tensors = rollouts()
    ours, model, trainer, trl_model = trainers(case, 0.04, top_entropy_quantile=quantile)
    batch = batch_of(*tensors)
    with torch.no_grad():
        old = ours.logps(model, batch) + 0.3 * torch.randn(tensors[2].shape, generator=gen(5))
    batch["ref_logps"] = ours.logps.reference(ours.model, batch)
    inputs = {**trl_inputs(*tensors), "old_per_token_logps": old, "ref_per_token_logps": batch["ref_logps"]}
    trl_loss = trainer._compute_loss(trl_model, inputs)
    trl_loss.backward()
    scale = grpo_loss_scale(
        CASES[case][0], sequences=8, tokens=tensors[3].sum(), micro_batches=1, max_completion_length=12
    )
    loss = ours.micro_loss({**batch, "old_logps": old}, LossStats()) * scale
    loss.backward()
    assert loss.item() == pytest.approx(trl_loss.item(), abs=1e-6)
    assert_same_gradients(model, trl_model)


def test_the_mask_keeps_the_top_quantile_of_entropies():
    from honing.methods.grpo_entropy import high_entropy_mask

    entropies = torch.tensor([[0.1, 0.9, 0.5, 7.0], [0.3, 0.7, 0.2, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    kept = high_entropy_mask(entropies, mask, 0.8)  # top 20% of the 7 masked-in values: the highest two
    assert kept.tolist() == [[False, True, False, False], [False, True, False, False]]
    assert not high_entropy_mask(entropies, torch.zeros_like(mask), 0.5).any()
