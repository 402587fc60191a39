"""NEFTune (Jain et al. 2023, arXiv:2310.05914): uniform noise on the input embeddings of SFT's training forwards.

Each embedding gets noise drawn from U(-m, m) with m = alpha / sqrt(L * d), d the hidden size and L the length of
the sequence the token belongs to. transformers' ``neftune_post_forward_hook`` (which TRL uses) takes L as the
batch's width, padding and all; with packed rows that is the whole row, so a short conversation packed with
others gets far less noise than it would alone (transformers issue 34659). honing takes L per sequence: a padded
row's own tokens, a packed row's document (from ``position_ids``). Rows that are neither padded nor packed get
transformers' noise, drawn in the same order from the same generator.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import torch

from honing.models.wrappers import transformers_model


def sequence_lengths(micro_batch: Mapping[str, torch.Tensor], width: int) -> torch.Tensor | int:
    """The length of the sequence each position belongs to, ``(rows, width)``: a packed row's document (its
    ``position_ids`` restart at 0), a padded row's real tokens (``attention_mask``); else ``width``, every row's."""
    position_ids = micro_batch.get("position_ids")
    if position_ids is not None and position_ids.dim() == 2:
        starts = position_ids == 0
        starts[:, 0] = True
        document = starts.long().cumsum(1) - 1  # each position's document, counted from 0 in its row
        counts = torch.zeros_like(document).scatter_add_(1, document, torch.ones_like(document))
        return counts.gather(1, document)
    mask = micro_batch.get("attention_mask")
    if mask is not None and mask.dim() == 2:
        return mask.sum(1, keepdim=True).clamp(min=1).expand(-1, width)
    return width


def noisy(embeddings: torch.Tensor, alpha: float, lengths: torch.Tensor | int) -> torch.Tensor:
    """``embeddings`` (rows, width, d) plus U(-m, m) noise, m = alpha / sqrt(L * d) with L from ``lengths`` (one
    number, or one per position)."""
    hidden = embeddings.size(2)
    if isinstance(lengths, int):  # transformers' hook, as it is written
        magnitude = alpha / torch.sqrt(torch.tensor(lengths * hidden))
        return embeddings + torch.zeros_like(embeddings).uniform_(-magnitude, magnitude)
    magnitude = alpha / torch.sqrt(lengths.to(device=embeddings.device, dtype=torch.float32) * hidden)
    noise = torch.zeros_like(embeddings).uniform_(-1.0, 1.0)  # the same draws as above, scaled per position
    return embeddings + noise * magnitude[..., None].to(embeddings.dtype)


@contextmanager
def noisy_embeddings(model: torch.nn.Module, alpha: float, micro_batch: Mapping[str, torch.Tensor]) -> Iterator[None]:
    """Inside the block, the model's input embeddings come out with NEFTune's noise for ``micro_batch``'s
    sequences; only forwards run inside it get noise (never evaluation or generation)."""
    embedding = transformers_model(model).get_input_embeddings()
    width = int(micro_batch["input_ids"].shape[1])
    lengths = sequence_lengths(micro_batch, width)
    handle = embedding.register_forward_hook(lambda module, inputs, output: noisy(output, alpha, lengths))
    try:
        yield
    finally:
        handle.remove()
