"""Collators: rows in, one batch out, and what a train module needs to know about that batch.

A collator is the one place that knows a batch's layout (torchtitan's pattern): how it splits into
micro-batches, which keys the model takes, how many real tokens it holds, and what a filler batch
that counts for nothing looks like. A new data shape (patch-flattened ``pixel_values``, preference
pairs) is a new collator; the train module and the loop never slice a batch themselves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from honing.errors import DataError
from honing.losses import IGNORE_INDEX

__all__ = ["Collator", "PadCollator", "VarlenCollator", "stack_collate", "pad_collate", "packed_collate"]


class Collator:
    """Stacks rows of equal length; rows are the batch's first dimension and split along it."""

    #: the batch keys passed to the model's forward (the rest, e.g. ``labels``, are the loss's)
    model_input_keys: tuple[str, ...] = ("input_ids", "attention_mask", "position_ids")

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Stack each field of the items into one batch tensor (numbers become a tensor, others a list)."""
        batch: dict[str, Any] = {}
        for key in items[0]:
            values = [item[key] for item in items]
            if isinstance(values[0], torch.Tensor):
                batch[key] = torch.stack(values)
            elif isinstance(values[0], (int, float, bool)):
                batch[key] = torch.tensor(values)
            else:
                batch[key] = values
        return batch

    def num_rows(self, batch: Mapping[str, Any]) -> int:
        """How many rows (examples or packed rows) the batch holds."""
        return int(batch["input_ids"].shape[0])

    def split(self, batch: Mapping[str, Any], rows_per_micro_batch: int) -> list[dict[str, torch.Tensor]]:
        """The batch cut into micro-batches of at most ``rows_per_micro_batch`` rows (tensors only)."""
        rows = self.num_rows(batch)
        size = max(1, min(rows_per_micro_batch, rows))
        return [
            {key: value[start : start + size] for key, value in batch.items() if isinstance(value, torch.Tensor)}
            for start in range(0, rows, size)
        ]

    def model_inputs(self, micro_batch: Mapping[str, Any]) -> dict[str, Any]:
        """The keyword arguments of the model's forward for this (micro-)batch."""
        return {key: micro_batch[key] for key in self.model_input_keys if key in micro_batch}

    def num_tokens(self, batch: Mapping[str, Any]) -> int:
        """Real (non-pad) tokens in this rank's batch: ``num_real_tokens`` (packed and padded rows), else
        the attention mask's ones, else every input id."""
        real = batch.get("num_real_tokens")
        if real is not None:
            return int(torch.as_tensor(real).sum().item())
        mask = batch.get("attention_mask")
        if mask is not None:
            return int(mask.sum().item())
        return batch["input_ids"].numel()

    def filler(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """The batch with every label ignored and no real tokens: a forward that counts for nothing (ranks
        that ran out of evaluation rows still take part in every FSDP2 forward with it)."""
        filler = dict(batch)
        filler["labels"] = torch.full_like(batch["labels"], IGNORE_INDEX)
        if "num_real_tokens" in filler:
            filler["num_real_tokens"] = torch.zeros_like(torch.as_tensor(filler["num_real_tokens"]))
        return filler


class PadCollator(Collator):
    """Right-pads a batch to its longest row, with ``attention_mask`` and ``num_real_tokens``."""

    def __init__(self, pad_token_id: int | None):
        if pad_token_id is None or int(pad_token_id) < 0:
            raise DataError(
                f"pad_token_id is {pad_token_id!r}; padded batches need a pad token id >= 0 "
                "(give the tokenizer a pad token)"
            )
        self.pad_token_id = int(pad_token_id)

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if all(isinstance(item["input_ids"], list) and isinstance(item["labels"], list) for item in items):
            return self._from_lists(items)
        rows = [torch.as_tensor(item["input_ids"], dtype=torch.long) for item in items]
        lengths = torch.tensor([len(row) for row in rows])
        width = int(lengths.max())
        input_ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
        for i, (row, item) in enumerate(zip(rows, items)):
            input_ids[i, : len(row)] = row
            labels[i, : len(row)] = torch.as_tensor(item["labels"], dtype=torch.long)
        # Right padding keeps each real token at its unpadded position, so the default position_ids
        # are right and the mask only has to hide the pad keys.
        attention_mask = (torch.arange(width) < lengths[:, None]).long()
        return {"input_ids": input_ids, "labels": labels, "attention_mask": attention_mask, "num_real_tokens": lengths}

    def _from_lists(self, items: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        """The same batch from rows stored as lists (VL rows): padded as lists, one tensor per field, where the
        row-by-row copies take ~100 operators for 8 rows (costly on a machine of high per-operator overhead)."""
        lengths = [len(item["input_ids"]) for item in items]
        width = max(lengths)
        ids = [item["input_ids"] + [self.pad_token_id] * (width - n) for item, n in zip(items, lengths)]
        labels = [item["labels"] + [IGNORE_INDEX] * (width - n) for item, n in zip(items, lengths)]
        mask = [[1] * n + [0] * (width - n) for n in lengths]
        return {
            "input_ids": torch.tensor(ids, dtype=torch.long),
            "labels": torch.tensor(labels, dtype=torch.long),
            "attention_mask": torch.tensor(mask, dtype=torch.long),
            "num_real_tokens": torch.tensor(lengths),
        }


class VarlenCollator(Collator):
    """Packed rows whose micro-batches reach the model as one row, end to end: flash attention's varlen path
    reads the documents' boundaries from ``position_ids`` only in a batch of one row (transformers'
    ``_is_packed_sequence``); given several rows it runs each as one sequence and documents see each other."""

    def split(self, batch: Mapping[str, Any], rows_per_micro_batch: int) -> list[dict[str, torch.Tensor]]:
        return [self.one_row(micro) for micro in super().split(batch, rows_per_micro_batch)]

    @staticmethod
    def one_row(micro: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The micro-batch's ``[rows, width, ...]`` tensors as ``[1, rows * width, ...]``; the same loss."""
        rows, width = micro["input_ids"].shape[:2]
        flat: dict[str, torch.Tensor] = {}
        for key, value in micro.items():
            if value.dim() >= 2 and tuple(value.shape[:2]) == (rows, width):
                if key == "labels":
                    # A row's first label is never a target (labels shift by one inside the loss); end to end it
                    # would be predicted from the previous row's last token.
                    value = value.clone()
                    value[:, 0] = IGNORE_INDEX
                value = value.reshape(1, rows * width, *value.shape[2:])
            flat[key] = value
        return flat


#: the default collator: stack rows of equal length (pretraining rows, packed SFT rows)
stack_collate = Collator()


def padded_rows(
    rows: Sequence[Sequence[int]], pad_value: int, *, left: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, mask)``: token-id lists padded with ``pad_value`` to the longest (on the left for generation prompts,
    else on the right), the mask 1 on each row's own tokens."""
    width = max((len(row) for row in rows), default=0)
    ids = torch.full((len(rows), width), pad_value, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for index, row in enumerate(rows):
        if not len(row):
            continue
        where = slice(width - len(row), width) if left else slice(0, len(row))
        ids[index, where] = torch.as_tensor(row, dtype=torch.long)
        mask[index, where] = 1
    return ids, mask


def pad_collate(pad_token_id: int | None) -> PadCollator:
    """A collator that right-pads each batch to its longest row (see ``PadCollator``)."""
    return PadCollator(pad_token_id)


def packed_collate(attention: str | None) -> Collator:
    """The collator of packed rows for the attention kernel in use: stacked, or laid end to end per micro-batch
    under flash attention (whose varlen path reads documents from position_ids only in a batch of one row)."""
    return VarlenCollator() if attention and str(attention).startswith("flash_attention") else stack_collate
