"""Cut a micro-batch's rows for one sequence-parallel rank (``parallel.cp``, Ulysses: ``honing.models.ulysses``).

Every rank of a sequence-parallel group reads the same batch; each keeps a contiguous slice of every row. What
must come from the whole row is computed before the cut:

- next-token targets: shifted on the whole row, so the last token of a slice is trained to predict the first
  token of the next rank's slice (shifting each slice would drop those targets);
- positions: the whole row's (a packed row's per-document positions, or ``0 … width-1``), so rotary embeddings see
  global positions; the whole row's positions and padding mask travel with the slice, and the forward builds the
  attention mask over the whole row from them (a slice alone cannot tell where its first document began).

A row whose width ``cp`` does not divide is padded at its end with ignored targets: under causal attention no real
token sees a later one, so the padding changes no number.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from honing.errors import ConfigError
from honing.losses import IGNORE_INDEX, next_token_targets
from honing.models.ulysses import full_row_attention

#: the per-token keys a split knows how to cut (anything else per token, e.g. pixels, is refused)
SPLIT_KEYS = ("input_ids", "labels", "position_ids", "attention_mask")


def check_splittable(train_module: Any) -> None:
    """Refuse, in one line naming ``parallel.cp``, a method whose step cannot train on slices of rows (DPO's packed
    pairs, GRPO's rollouts) or whose batches feed the model more than tokens (VL-SFT's pixels: the vision tower
    runs inside the forward and its image tokens would be split over ranks)."""
    cp = train_module.parallel_dims.cp
    if not train_module.splits_rows:
        raise ConfigError(
            f"parallel.cp={cp}: {type(train_module).__name__} cannot split its rows over sequence-parallel ranks; "
            "pretraining and SFT can (use parallel.cp=1 here)"
        )
    extra = [key for key in train_module.collator.model_input_keys if key not in SPLIT_KEYS]
    if extra:
        raise ConfigError(
            f"parallel.cp={cp}: the batches also feed the model {', '.join(extra)}, which sequence parallelism "
            "cannot split (the vision tower runs inside the forward on whole rows); use parallel.cp=1"
        )


def split_rows(micro: Mapping[str, torch.Tensor], rank: int, size: int) -> dict[str, torch.Tensor]:
    """This rank's slice of every row of ``micro``: ``input_ids``, ``position_ids`` and shifted ``targets`` of the
    slice, the whole rows' ``row_position_ids`` (and ``row_attention_mask`` when padded); other keys as they were."""
    input_ids = micro["input_ids"]
    rows, width = input_ids.shape
    for key, value in micro.items():
        if key not in SPLIT_KEYS and value.dim() >= 2 and tuple(value.shape[:2]) == (rows, width):
            raise ValueError(f"parallel.cp: the batch key {key!r} is per token and cannot be split over ranks")
    positions = micro.get("position_ids")
    if positions is None:
        positions = torch.arange(width, device=input_ids.device).expand(rows, width)
    targets = next_token_targets(micro["labels"])
    padding_mask = micro.get("attention_mask")
    extra = -width % size
    if extra:
        # any token id: its target is ignored and causal attention hides it from every real token
        input_ids = F.pad(input_ids, (0, extra), value=0)
        targets = F.pad(targets, (0, extra), value=IGNORE_INDEX)
        positions = torch.cat([positions, positions[:, -1:] + torch.arange(1, extra + 1, device=positions.device)], 1)
        if padding_mask is not None:
            padding_mask = F.pad(padding_mask, (0, extra), value=0)
    local = slice(rank * (width + extra) // size, (rank + 1) * (width + extra) // size)
    split = {key: value for key, value in micro.items() if key not in SPLIT_KEYS}
    split.update(
        input_ids=input_ids[:, local],
        position_ids=positions[:, local],
        targets=targets[:, local],
        row_position_ids=positions,
    )
    if padding_mask is not None:
        split["row_attention_mask"] = padding_mask
    return split


def split_model_inputs(model: nn.Module, micro: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """The forward's keyword arguments for a split micro-batch: the slice's tokens and global positions, and the
    attention over whole rows (``honing.models.ulysses.full_row_attention``)."""
    return {
        "input_ids": micro["input_ids"],
        "position_ids": micro["position_ids"],
        **full_row_attention(model, micro["row_position_ids"], micro.get("row_attention_mask")),
    }
