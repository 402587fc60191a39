"""Loss functions as pure functions, tested against hand-computed numbers."""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


def next_token_targets(labels: torch.Tensor) -> torch.Tensor:
    """Labels shifted left by one: position t is trained to predict token t+1; the last has no target."""
    return F.pad(labels[..., 1:], (0, 1), value=IGNORE_INDEX)


def count_target_tokens(labels: torch.Tensor) -> torch.Tensor:
    """How many positions of ``labels`` (unshifted) carry a next-token loss."""
    return (labels[..., 1:] != IGNORE_INDEX).sum()


def cross_entropy_sum(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Summed next-token cross-entropy over the positions that have a target.

    Summing (not averaging) lets the caller divide by the token count of the whole optimizer
    step, so the update does not depend on how the batch is split into micro-batches.
    """
    targets = next_token_targets(labels).reshape(-1)
    flat = logits.reshape(-1, logits.size(-1)).float()
    return F.cross_entropy(flat, targets, ignore_index=IGNORE_INDEX, reduction="sum")


def count_correct(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """How many next-token targets the argmax of ``logits`` predicts exactly (token accuracy)."""
    targets = next_token_targets(labels)
    return ((logits.argmax(-1) == targets) & (targets != IGNORE_INDEX)).sum()
