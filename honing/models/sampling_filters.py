"""The logits filters honing's sampler applies beside temperature, top-k and top-p, each as transformers' logits
processor computes it (``RepetitionPenaltyLogitsProcessor``, ``MinPLogitsWarper``), so TRL's sampling keys mean
the same here."""

from __future__ import annotations

import torch


def seen_tokens(input_ids: torch.Tensor, attention_mask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """``[rows, vocab]`` booleans: the tokens each row's prompt holds (its padding left out, so a row's penalty
    does not depend on how much padding its batch gave it)."""
    counts = torch.zeros(input_ids.shape[0], vocab_size, dtype=torch.int32, device=input_ids.device)
    return counts.scatter_add_(1, input_ids, attention_mask.to(torch.int32)) > 0


def penalize_repeats(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """CTRL's repetition penalty (transformers' ``RepetitionPenaltyLogitsProcessor``): the logit of a token already
    ``seen`` divided by ``penalty`` where positive, multiplied where negative (> 1: repeats less likely)."""
    penalized = torch.where(logits < 0, logits * penalty, logits / penalty)
    return torch.where(seen, penalized, logits)


def min_p_filter(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """Min-p sampling (transformers' ``MinPLogitsWarper``): tokens whose probability is below ``min_p`` times the
    most likely token's are removed (the most likely token always stays, as ``min_p`` <= 1)."""
    probs = logits.softmax(-1)
    threshold = min_p * probs.amax(dim=-1, keepdim=True)
    return logits.masked_fill(probs < threshold, float("-inf"))
