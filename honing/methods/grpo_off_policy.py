"""DeepSeek-V3.2's off-policy sequence mask (TRL's ``off_policy_mask_threshold``): a completion of negative
advantage whose mean token KL(sampling policy ‖ current policy) is above the threshold gets no policy loss; a
positive one, or one close to the policy that sampled it, keeps its loss (the KL term to the reference is kept)."""

from __future__ import annotations

import torch


def off_policy_mask(
    advantages: torch.Tensor, logps: torch.Tensor, sampling_logps: torch.Tensor, mask: torch.Tensor, threshold: float
) -> torch.Tensor:
    """``(rows, 1)``: 1 to keep a completion's policy loss, 0 to drop it (TRL's ``get_off_policy_mask``): the
    per-token ``sampling_logps − logps`` (detached; a NaN counts 0) averaged over ``mask``, kept when at most
    ``threshold`` or when the advantage is not negative."""
    kl = torch.nan_to_num(sampling_logps - logps.detach(), nan=0.0)
    weights = mask.to(kl.dtype)
    mean_kl = (kl * weights).sum(1, keepdim=True) / weights.sum(1, keepdim=True).clamp(min=1.0)
    advantages = advantages.reshape(-1, 1)
    return ((advantages >= 0) | (mean_kl <= threshold)).to(mask.dtype)
