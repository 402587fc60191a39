"""The estimators beside GRPO's (whose token and GSPO sequence levels are ``honing.losses.grpo_per_token_loss``), as
TRL defines them: RLOO's leave-one-out baseline, sequence loss and KL penalty (RLOOTrainer), and the advantages of a
step's groups over ranks. Pure functions on log-probs and rewards; the train modules call them."""

from __future__ import annotations

import torch

from honing.distributed import is_distributed
from honing.losses import clipped_policy_loss, group_advantages, kl_estimate, nanstd
from honing.methods.step_ranks import StepRanks


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
    loss, _ = clipped_policy_loss(ratio, advantages, epsilon, epsilon_high)
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
    spans_ranks: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO's ``(advantages, std)`` of this rank's rewards (``spans_ranks``: a group may span ranks, whose rewards
    in rank order are the step's groups in order, as TRL's RepeatSampler lays them out, so every rank's rewards are
    gathered and each whole group normalised; ``batch`` scaling uses every rank's rewards, and ``normalize_then_sum``
    standardises the summed rewards over every rank's completions, as one group; the gather runs on ``device``)."""
    whole_batch = aggregation == "normalize_then_sum"
    if (scale_rewards != "batch" and not whole_batch and not spans_ranks) or not is_distributed():
        if whole_batch:
            return group_advantages(rewards, len(rewards), "group")
        return group_advantages(rewards, num_generations, scale_rewards)
    everyone, mine = ranks.gather_dp(rewards, device)
    if whole_batch:
        advantages, std = group_advantages(everyone, len(everyone), "group")
    else:
        advantages, std = group_advantages(everyone, num_generations, scale_rewards)
    return advantages[mine], std[mine]
