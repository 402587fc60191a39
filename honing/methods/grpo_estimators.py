"""The policy-gradient estimators beside GRPO's token-level one, as TRL defines them: GSPO's sequence-level
importance ratio (GRPOTrainer's ``importance_sampling_level``) and RLOO's leave-one-out baseline and sequence loss
(RLOOTrainer). Pure functions on log-probs and rewards; the train modules call them."""

from __future__ import annotations

import torch

from honing.distributed import is_distributed
from honing.losses import clipped_policy_loss, group_advantages, kl_estimate, kl_term, nanstd, with_kl
from honing.methods.step_ranks import StepRanks

IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence", "sequence_token")


def sequence_log_ratio(logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each completion's mean per-token log-ratio (GSPO's length-normalised log importance weight), ``(B,)``."""
    mask = mask.to(logps.dtype)
    return ((logps - old_logps) * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)


def gspo_per_token_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    level: str = "sequence",
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    ref_logps: torch.Tensor | None = None,
    beta: float = 0.0,
    kl_estimator: str = "k3",
    use_bias_correction_kl: bool = True,
    delta: float | None = None,
    policy_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``(loss, ratio, per-token KL)`` of GRPO's clipped objective with GSPO's importance weight: one ratio per
    completion, exp(mean log-ratio), clipped as a whole (``sequence``: shapes ``(B, 1)`` without a KL term, as TRL's;
    ``sequence_token``: GSPO-token, the same value on every token, sg[s_i]·π/sg[π], so each token's gradient is its
    own). The KL term is ``kl_estimate`` (TRL's k3) times the ratio (``use_bias_correction_kl``), added per token;
    ``delta`` and ``policy_mask`` as in ``honing.losses.grpo_per_token_loss``."""
    epsilon_high = epsilon if epsilon_high is None else epsilon_high
    advantages = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
    ratio = torch.exp(sequence_log_weights(logps, old_logps, mask, level))
    loss, capped = clipped_policy_loss(ratio, advantages, epsilon, epsilon_high, delta)
    kl = kl_term(logps, ref_logps, ratio, beta, kl_estimator, use_bias_correction_kl)
    return with_kl(loss, kl, beta, policy_mask), capped, kl


def sequence_log_weights(logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor, level: str) -> torch.Tensor:
    """GSPO's log importance weight, ``(B, 1)`` (``sequence``), or the same value on every token with each token's own
    gradient (``sequence_token``: log sg[s_i] + log π − sg[log π])."""
    if level not in ("sequence", "sequence_token"):
        raise ValueError(f"importance_sampling_level must be 'sequence' or 'sequence_token' here, got {level!r}")
    log_weights = sequence_log_ratio(logps, old_logps, mask).unsqueeze(-1)
    if level == "sequence_token":
        log_weights = log_weights.detach() + logps - logps.detach()
    return log_weights


def rloo_advantages(
    rewards: torch.Tensor, num_generations: int, normalize: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(advantages, std)`` with RLOO's leave-one-out baseline: each completion's reward minus the mean of its
    group's other scored rewards (NaN rewards are left out and get advantage 0; a group with one scored completion
    teaches nothing); ``normalize``: then standardised over the batch (TRL's ``normalize_advantages``). ``std`` is
    each completion's group's reward std, for the zero-std metric."""
    grouped = rewards.view(-1, num_generations)
    scored = (~torch.isnan(grouped)).sum(dim=1, keepdim=True)
    baselines = (torch.nansum(grouped, dim=1, keepdim=True) - grouped) / (scored - 1)
    advantages = rewards - baselines.view(-1)
    if normalize:
        advantages = (advantages - torch.nanmean(advantages)) / (nanstd(advantages) + 1e-4)
    std = nanstd(grouped, dim=1).repeat_interleave(num_generations)
    return torch.nan_to_num(advantages, nan=0.0), std


def rloo_sequence_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    mask: torch.Tensor,
    advantages: torch.Tensor,
    *,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(per-completion loss (B,), ratio (B, 1))``: RLOO's clipped surrogate on the ratio of whole-sequence
    probabilities, exp(Σ logp − Σ old_logp) (a sum, not GSPO's mean)."""
    epsilon_high = epsilon if epsilon_high is None else epsilon_high
    mask = mask.to(logps.dtype)
    ratio = torch.exp((logps * mask).sum(-1) - (old_logps * mask).sum(-1))
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon_high)
    loss = -torch.min(ratio * advantages, clipped * advantages)
    return loss, ratio.unsqueeze(-1)


def sequence_kl_penalty(
    policy_logps: torch.Tensor, ref_logps: torch.Tensor, mask: torch.Tensor, estimator: str = "k1"
) -> torch.Tensor:
    """RLOO's KL estimate, subtracted (times beta) from each completion's reward: Σ_t of a per-token estimate,
    by default k1 = log π − log π_ref, the first-order estimate of the paper (it can be negative per token, unlike
    GRPO's k3), ``(B,)``."""
    return (kl_estimate(policy_logps, ref_logps, estimator) * mask.to(policy_logps.dtype)).sum(-1)


def group_relative_advantages(
    rewards: torch.Tensor,
    num_generations: int,
    scale_rewards: str,
    aggregation: str,
    ranks: StepRanks,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO's ``(advantages, std)`` of this rank's rewards (groups never span ranks; ``batch`` scaling uses every
    rank's rewards, and ``normalize_then_sum`` standardises the summed rewards over every rank's completions, as one
    group; the gather runs on ``device``)."""
    whole_batch = aggregation == "normalize_then_sum"
    if (scale_rewards != "batch" and not whole_batch) or not is_distributed():
        if whole_batch:
            return group_advantages(rewards, len(rewards), "group")
        return group_advantages(rewards, num_generations, scale_rewards)
    everyone, mine = ranks.gather_dp(rewards, device)
    if whole_batch:
        advantages, std = group_advantages(everyone, len(everyone), "group")
    else:
        advantages, std = group_advantages(everyone, num_generations, "batch")
    return advantages[mine], std[mine]
