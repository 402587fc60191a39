"""The KL estimators of ``grpo.kl_estimator`` / ``rloo.kl_estimator`` (``honing.losses.kl_estimate``): hand-computed
values, verl's ``kl_penalty_forward`` transcribed, and how GRPO's loss and RLOO's reward penalty use them."""

from __future__ import annotations

import math

import pytest
import torch

from honing.config.grpo_schema import GRPOSection
from honing.config.rloo_schema import RLOOSection
from honing.losses import KL_ESTIMATORS, grpo_per_token_loss, kl_estimate
from honing.methods.grpo import GRPOTrainModule
from honing.methods.grpo_estimators import sequence_kl_penalty
from honing.methods.rloo import RLOOTrainModule

LOG2 = math.log(2.0)


def verl_kl_penalty_forward(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """verl's estimator, transcribed from ``kl_penalty_forward`` of
    https://github.com/volcengine/verl/blob/main/verl/trainer/ppo/core_algos.py (``full`` raises there too)."""
    if kl_penalty in ("kl", "k1"):
        return logprob - ref_logprob
    if kl_penalty == "abs":
        return (logprob - ref_logprob).abs()
    if kl_penalty in ("mse", "k2"):
        return 0.5 * (logprob - ref_logprob).square()
    if kl_penalty in ("low_var_kl", "k3"):
        kl = ref_logprob - logprob
        kl = torch.clamp(kl, min=-20, max=20)
        ratio = torch.exp(kl)
        kld = (ratio - kl - 1).contiguous()
        return torch.clamp(kld, min=-10, max=10)
    raise NotImplementedError(kl_penalty)


# policy probabilities 1/2 and 1/4 of the sampled tokens, the reference's 1/4 and 1/2
POLICY = torch.tensor([[math.log(0.5), math.log(0.25)]], dtype=torch.float64)
REFERENCE = torch.tensor([[math.log(0.25), math.log(0.5)]], dtype=torch.float64)
HAND = {
    "k1": [LOG2, -LOG2],
    "abs": [LOG2, LOG2],
    "k2": [0.5 * LOG2**2, 0.5 * LOG2**2],
    # π_ref/π − log(π_ref/π) − 1: 1/2 + log 2 − 1 and 2 − log 2 − 1
    "k3": [LOG2 - 0.5, 1.0 - LOG2],
    "low_var_kl": [LOG2 - 0.5, 1.0 - LOG2],
}


@pytest.mark.parametrize("estimator", KL_ESTIMATORS)
def test_estimates_by_hand(estimator):
    assert torch.allclose(kl_estimate(POLICY, REFERENCE, estimator), torch.tensor([HAND[estimator]]).double())


def test_low_var_kl_clamps_as_verl_and_k3_does_not():
    policy, reference = torch.tensor([0.0]), torch.tensor([-30.0])  # π_ref/π = e^-30
    assert kl_estimate(policy, reference, "k3").item() == pytest.approx(29.0)
    assert kl_estimate(policy, reference, "low_var_kl").item() == 10.0  # log-ratio clamped to -20, then 19 to 10


# verl's names (kl_loss_type) and the estimator of honing that is the same function
VERL_NAMES = {"kl": "k1", "k1": "k1", "abs": "abs", "mse": "k2", "k2": "k2", "low_var_kl": "low_var_kl"}


@pytest.mark.parametrize("verl_name", sorted(VERL_NAMES))
def test_equal_to_verl(verl_name):
    generator = torch.Generator().manual_seed(0)
    policy = -torch.rand(4, 7, generator=generator) * 30  # spans verl's clamps
    reference = -torch.rand(4, 7, generator=generator) * 30
    ours = kl_estimate(policy, reference, VERL_NAMES[verl_name])
    assert torch.equal(ours, verl_kl_penalty_forward(policy, reference, verl_name))


def test_unknown_estimator_is_refused():
    with pytest.raises(ValueError, match="kl estimator must be one of"):
        kl_estimate(POLICY, REFERENCE, "full")


def test_grpo_loss_adds_the_estimate_times_beta():
    generator = torch.Generator().manual_seed(1)
    logps, old, reference = (-torch.rand(2, 5, generator=generator) for _ in range(3))
    advantages = torch.tensor([1.0, -0.5])
    bare, ratio, _ = grpo_per_token_loss(logps, old, advantages)
    for estimator in KL_ESTIMATORS:
        # verl's use_kl_loss: β × the estimate; TRL's default: β × the estimate × the ratio
        plain, _, kl = grpo_per_token_loss(
            logps, old, advantages, ref_logps=reference, beta=0.1, kl_estimator=estimator, use_bias_correction_kl=False
        )
        assert torch.allclose(plain, bare + 0.1 * verl_kl_penalty_forward(logps, reference, _verl(estimator)))
        corrected, _, _ = grpo_per_token_loss(
            logps, old, advantages, ref_logps=reference, beta=0.1, kl_estimator=estimator
        )
        assert torch.allclose(corrected, bare + 0.1 * kl * ratio)
    sequence, _, kl = grpo_per_token_loss(
        logps,
        old,
        advantages,
        mask=torch.ones_like(logps),
        level="sequence",
        ref_logps=reference,
        beta=0.1,
        kl_estimator="k2",
        use_bias_correction_kl=False,
    )
    assert torch.allclose(kl, 0.5 * (logps - reference).square())


def test_the_default_is_trls_k3_times_the_ratio():
    """Term for term the expression GRPO had before the key, so configs that do not set it keep their bits."""
    generator = torch.Generator().manual_seed(2)
    logps, old, reference = (-torch.rand(3, 4, generator=generator) for _ in range(3))
    _, ratio, kl = grpo_per_token_loss(logps, old, torch.ones(3), ref_logps=reference, beta=0.04)
    assert torch.equal(kl, (torch.exp(reference - logps) - (reference - logps) - 1) * ratio)
    assert GRPOSection().kl_estimator == "k3" and GRPOSection().use_bias_correction_kl


def test_rloo_penalty_sums_the_chosen_estimate():
    mask = torch.tensor([[1, 1], [1, 0]])
    policy = POLICY.repeat(2, 1)
    reference = REFERENCE.repeat(2, 1)
    assert torch.allclose(sequence_kl_penalty(policy, reference, mask), torch.tensor([0.0, LOG2]).double())
    k3 = sequence_kl_penalty(policy, reference, mask, "k3")
    assert torch.allclose(k3, torch.tensor([0.5, LOG2 - 0.5]).double())
    assert RLOOSection().kl_estimator == "k1"  # TRL's RLOO: the summed log-ratio


def test_the_keys_reach_the_train_modules():
    settings = GRPOTrainModule.settings(GRPOSection(kl_estimator="k2", use_bias_correction_kl=False))
    assert settings.kl_estimator == "k2" and settings.use_bias_correction_kl is False
    assert RLOOTrainModule.settings(RLOOSection(kl_estimator="abs")).kl_estimator == "abs"


def _verl(estimator: str) -> str:
    # log-probs in (-1, 0] never reach verl's clamps, so its k3 is honing's unclamped one here
    return estimator
