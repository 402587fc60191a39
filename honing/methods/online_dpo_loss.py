"""Online DPO's maths as pure functions, TRL's OnlineDPOTrainer.training_step (trl/experimental/online_dpo): the
rewards that rank a sampled pair, which of the two is chosen, and DPO's loss of each pair (``honing.dpo_losses``).

A step's completions come in pairs, the two of a prompt side by side (rows 2i and 2i+1; TRL stacks all first
completions, then all second ones: the same pairs in another order)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from honing.dpo_losses import dpo_loss


def pair_rewards(
    rewards_per_func: torch.Tensor, weights: torch.Tensor, ended: torch.Tensor, missing_eos_penalty: float | None
) -> torch.Tensor:
    """Each completion's reward as TRL ranks with it: the weighted sum over reward functions, a None (NaN) counting
    as 0 (``nansum``), less ``missing_eos_penalty`` where the completion never reached a stop token."""
    rewards = (rewards_per_func * weights.to(rewards_per_func).unsqueeze(0)).nansum(dim=1)
    if missing_eos_penalty is not None:
        rewards = rewards - missing_eos_penalty * (~ended.to(rewards.device)).to(rewards.dtype)
    return rewards


def first_is_chosen(rewards: torch.Tensor) -> torch.Tensor:
    """Per pair, whether its first completion is the chosen one: the higher reward, the first on a tie (TRL's
    ``first_half >= second_half``)."""
    return rewards[0::2] >= rewards[1::2]


@dataclass(frozen=True)
class PairTerms:
    """One micro-batch's pairs: each pair's loss and the summed log-probs it came from (policy and reference)."""

    losses: torch.Tensor
    chosen: torch.Tensor
    rejected: torch.Tensor
    ref_chosen: torch.Tensor
    ref_rejected: torch.Tensor


def online_dpo_terms(
    logps: torch.Tensor,
    ref_logps: torch.Tensor,
    completion_mask: torch.Tensor,
    first_chosen: torch.Tensor,
    *,
    beta: float,
    loss_type: str = "sigmoid",
) -> PairTerms:
    """DPO's loss of each pair (not reduced) from per-token log-probs of the policy and the reference (rows in
    pairs), each completion's log-probs summed over its tokens. ``ipo`` is TRL's online IPO, (Δ − 1/(2β))² on the
    summed log-ratios: the completions' lengths are not divided out (DPO's ``ipo`` divides them), so they are 1."""
    mask = completion_mask.to(logps.dtype)
    policy = (logps * mask).sum(1).view(-1, 2)
    reference = (ref_logps * mask).sum(1).view(-1, 2)
    chosen_index = (~first_chosen).long().unsqueeze(1)  # 0: the first completion, 1: the second
    rejected_index = 1 - chosen_index
    chosen, rejected = policy.gather(1, chosen_index).squeeze(1), policy.gather(1, rejected_index).squeeze(1)
    ref_chosen = reference.gather(1, chosen_index).squeeze(1)
    ref_rejected = reference.gather(1, rejected_index).squeeze(1)
    ones = torch.ones_like(chosen)
    losses = dpo_loss(
        chosen,
        rejected,
        ref_chosen,
        ref_rejected,
        beta=beta,
        loss_type=loss_type,
        chosen_lengths=ones,
        rejected_lengths=ones,
    )
    return PairTerms(losses, chosen, rejected, ref_chosen, ref_rejected)
