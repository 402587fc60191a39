"""What DPO's options need of each token beyond a reply's summed log-prob: LD-DPO's split of each reply at the
length both replies share (``dpo.ld_alpha``), and WPO's log Σ_v p(v)² at each reply position (``dpo.use_weighting``).

Both are read in the same forward as the log-probs: the split as two more target columns (the tokens past the shared
length), the sums of log Σ p² beside the log-probs, without gradient (TRL computes WPO's weights under no_grad).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from honing.losses import IGNORE_INDEX

#: how many positions' logits the chunked head's WPO sums hold at once
SQUARE_SUM_CHUNK = 1024


def with_tail_targets(micro: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``micro`` with two more ``targets`` columns (after the others): the chosen and the rejected reply's tokens past
    the shorter reply's length (LD-DPO's verbose tail; TRL: ``comp_pos > shared_lens``), so that a reply's log-prob
    weighted as LD-DPO's is its sum − (1 − α) × its tail's."""
    targets = micro["targets"]
    replies = targets[..., :2]
    valid = replies != IGNORE_INDEX
    position = valid.cumsum(1)  # each reply token's 1-based place in its reply
    shared = valid.sum(1).min(-1).values  # per pair: the shorter reply's length
    tails = torch.where(valid & (position > shared[:, None, None]), replies, IGNORE_INDEX)
    return {**micro, "targets": torch.cat([targets, tails], dim=-1)}


def length_desensitized(logps: torch.Tensor, tail_logps: torch.Tensor, ld_alpha: float) -> torch.Tensor:
    """LD-DPO's reply log-probs: the shared part's plus ``ld_alpha`` × the tail's, from the whole reply's and the
    tail's sums."""
    return logps - (1.0 - ld_alpha) * tail_logps


@torch.no_grad()
def square_sums_from_logits(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Each completion's sum over its positions of log Σ_v p(v)² (rows, K), from the full logits (rows, length, V)."""
    per_position = (2 * logits.float().log_softmax(-1)).logsumexp(-1)
    valid = targets != IGNORE_INDEX
    return (per_position.unsqueeze(-1) * valid).sum(1)


@torch.no_grad()
def square_sums_from_hidden(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor
) -> torch.Tensor:
    """``square_sums_from_logits`` from the final hidden states and the head, the logits of ``SQUARE_SUM_CHUNK``
    completion positions at a time (the chunked head never holds them all)."""
    valid = targets != IGNORE_INDEX
    keep = valid.any(-1)
    values = [
        (2 * F.linear(part, weight, bias).float().log_softmax(-1)).logsumexp(-1)
        for part in hidden[keep].split(SQUARE_SUM_CHUNK)
    ]
    per_position = hidden.new_zeros(keep.shape, dtype=torch.float32)
    if values:
        per_position = per_position.index_put((keep,), torch.cat(values))
    return (per_position.unsqueeze(-1) * valid).sum(1)
