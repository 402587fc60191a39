"""TRL's GRPO loss types that do not clip the ratio PPO's way (GRPOTrainer._compute_loss, TRL 1.16): CISPO clips a
detached importance weight that multiplies the log-prob (MiniMax-M1), SAPO replaces the clip by a sigmoid gate
(Soft Adaptive Policy Optimization), VESPO weights the log-prob by a gamma function of the whole sequence's ratio.
Pure functions on log-probs; ``grpo_policy_loss.PolicyLoss`` picks one by ``loss_type``."""

from __future__ import annotations

import math

import torch

from honing.losses import importance_log_weights, kl_term, with_kl

SOFT_LOSS_TYPES = ("cispo", "sapo", "vespo")


@torch.no_grad()
def vespo_gamma_weights(
    advantages: torch.Tensor,
    log_ratio: torch.Tensor,
    mask: torch.Tensor,
    *,
    k_pos: float = 2.0,
    lambda_pos: float = 3.0,
    k_neg: float = 3.0,
    lambda_neg: float = 2.0,
) -> torch.Tensor:
    """VESPO's weight per sequence, ``(B, 1)``, no gradient: φ(w) = e^λ · w^k · e^(−λw) (φ(1) = 1) of the sequence
    ratio w = exp(Σ_t log-ratio), k and λ by the advantage's sign, computed in log space with TRL's clamps."""
    lower = math.log(1e-8)  # TRL's (and the paper code's) floor of log w
    log_ratio = torch.clamp(log_ratio, -20.0, 20.0)
    log_w = torch.clamp(torch.sum(log_ratio * mask, dim=-1, keepdim=True), lower, 20.0)
    nonneg = advantages >= 0
    k = torch.where(nonneg, k_pos, k_neg)
    lam = torch.where(nonneg, lambda_pos, lambda_neg).clamp(min=1e-4)
    log_phi = lam + k * log_w - lam * torch.exp(log_w)
    return torch.exp(log_phi).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


def soft_per_token_loss(
    loss_type: str,
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    level: str = "token",
    epsilon_high: float = 0.2,
    sapo_temperature_pos: float = 1.0,
    sapo_temperature_neg: float = 1.05,
    vespo: dict[str, float] | None = None,
    ref_logps: torch.Tensor | None = None,
    beta: float = 0.0,
    kl_estimator: str = "k3",
    use_bias_correction_kl: bool = True,
    policy_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """``(per-token loss, ratio, per-token KL, the loss's own metric)`` of ``cispo`` (−sg[min(ratio, ε_high)]·A·log π;
    metric: the share of ratios above ε_high with A > 0, TRL's ``cispo_clip_ratio``), ``sapo`` (−(4/τ)·σ(τ(ratio −
    1))·A, τ by the advantage's sign; no metric) or ``vespo`` (−φ(w)·A·log π, ``vespo`` holding k_pos, lambda_pos,
    k_neg, lambda_neg; metric: φ per sequence). The ratio is per token or GSPO's per sequence (``level``); the KL
    term and ``policy_mask`` as in ``honing.losses.grpo_per_token_loss``."""
    advantages = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
    log_ratio = logps - old_logps
    ratio = torch.exp(importance_log_weights(logps, old_logps, mask, level))
    kl = kl_term(logps, ref_logps, ratio, beta, kl_estimator, use_bias_correction_kl)
    if loss_type == "cispo":
        policy = -torch.clamp(ratio, max=epsilon_high).detach() * advantages * logps
        metric = ((ratio > epsilon_high) & (advantages > 0)).float()
    elif loss_type == "sapo":
        temperatures = torch.where(advantages > 0, sapo_temperature_pos, sapo_temperature_neg)
        policy = -(torch.sigmoid(temperatures * (ratio - 1)) * 4 / temperatures) * advantages
        metric = None
    elif loss_type == "vespo":
        metric = vespo_gamma_weights(advantages, log_ratio, mask.to(logps.dtype), **(vespo or {}))
        policy = -metric * advantages * logps
    else:
        raise ValueError(f"soft loss_type must be one of {SOFT_LOSS_TYPES}, got {loss_type!r}")
    return with_kl(policy, kl, beta, policy_mask), ratio, kl, metric
