"""Document masking for rows cut from a stream of documents: no token attends across a document boundary.

The same mechanism as packed SFT rows (``honing.data.chat.packing``): ``position_ids`` restart at 0 at each
document and there is no ``attention_mask``, so transformers builds a causal mask per document (the model
must run with ``use_cache=False``, as the train modules do). The first token of each document after the
row's first is not a label: predicting it would mean predicting it from the previous document.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from honing.losses import IGNORE_INDEX


def mask_documents(item: dict[str, torch.Tensor], lengths: Sequence[int]) -> dict[str, torch.Tensor]:
    """``item`` (``input_ids``, ``labels``) with per-document ``position_ids`` and boundary labels ignored;
    ``lengths`` are the row's document pieces in order, summing to the row's length."""
    bounds = torch.tensor(lengths, dtype=torch.long)
    starts = torch.cumsum(bounds, 0) - bounds
    # position j counts from the start of the document piece holding j
    position_ids = torch.arange(int(bounds.sum())) - torch.repeat_interleave(starts, bounds)
    labels = item["labels"].clone()
    labels[starts[1:]] = IGNORE_INDEX
    return {**item, "labels": labels, "position_ids": position_ids}
