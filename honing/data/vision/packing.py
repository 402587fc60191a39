"""Packed vision-language rows for the Qwen-VL families: several image conversations per row, each with its own
3-D rope positions, so a packed row gives the loss of its documents trained one by one.

A packed row has no attention mask. Its ``position_ids`` are ``[4, L]``: row 0 the text position, restarting
at 0 at every document (transformers builds one causal mask per document from it, as for packed text rows,
see ``honing.data.chat.packing``), rows 1-3 the temporal / height / width positions the model's own
``get_rope_index`` gives each document alone. The documents' images are concatenated in order, as the
vision tower splits them again by ``image_grid_thw``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from honing.data.chat.packing import best_fit_decreasing
from honing.data.vision.batches import ProcessedVLCollator
from honing.data.vision.processing import VLDataset, VLExample
from honing.losses import IGNORE_INDEX

#: one document's rope positions ``[4, 1, L]`` from its ids, token types and image grids (None without images)
RopePositions = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None"], torch.Tensor]


class VLPackedDataset(torch.utils.data.Dataset):
    """Rows of exactly ``max_length`` tokens best-fit packed from VL examples; pixels re-created per fetch."""

    def __init__(
        self,
        examples: Sequence[VLExample],
        max_length: int,
        *,
        rows: VLDataset,
        rope_positions: RopePositions,
        pad_token_id: int,
    ):
        self.rows = rows  # fetches one document's processed fields
        self.max_length = max_length
        self.rope_positions = rope_positions
        self.pad_token_id = int(pad_token_id)
        self.bins = best_fit_decreasing([len(example.input_ids) for example in examples], max_length)
        self.real_tokens = [sum(len(examples[i].input_ids) for i in indices) for indices in self.bins]

    @property
    def packing_efficiency(self) -> float:
        """Real tokens / (rows * max_length)."""
        return sum(self.real_tokens) / max(len(self.bins) * self.max_length, 1)

    def __len__(self) -> int:
        return len(self.bins)

    def __getitem__(self, index: int) -> dict[str, Any]:
        documents = [self.rows.processed(i) for i in self.bins[index]]
        ids, labels, types, positions = [], [], [], []
        image_fields: dict[str, list[torch.Tensor]] = {}
        for document in documents:
            doc_labels = document["labels"].clone()
            doc_labels[0] = IGNORE_INDEX  # the shifted loss would predict it from the previous document
            doc_types = document["mm_token_type_ids"]
            grid = document.get("image_grid_thw")
            ids.append(document["input_ids"])
            labels.append(doc_labels)
            types.append(doc_types)
            positions.append(self.rope_positions(document["input_ids"], doc_types, grid)[:, 0])
            for key, value in document.items():
                if key not in ("input_ids", "labels", "attention_mask", "mm_token_type_ids"):
                    image_fields.setdefault(key, []).append(value)
        used = sum(len(part) for part in ids)
        tail = self.max_length - used
        # The pad tail counts from 0 as a document of its own, so no real token attends to it.
        ids.append(torch.full((tail,), self.pad_token_id, dtype=torch.long))
        labels.append(torch.full((tail,), IGNORE_INDEX, dtype=torch.long))
        types.append(torch.zeros(tail, dtype=types[0].dtype))
        positions.append(torch.arange(tail, dtype=positions[0].dtype).expand(4, tail))
        row: dict[str, Any] = {
            "input_ids": torch.cat(ids),
            "labels": torch.cat(labels),
            "mm_token_type_ids": torch.cat(types),
            "position_ids": torch.cat(positions, dim=1),
            "num_real_tokens": used,
        }
        row.update({key: torch.cat(values) for key, values in image_fields.items()})
        return row


class PackedVLCollator(ProcessedVLCollator):
    """Packed VL rows: rope positions stacked to ``[4, rows, L]``, no attention mask, real tokens as packed."""

    def __init__(self, pad_token_id: int | None, model_input_keys: Sequence[str]):
        keys = [key for key in model_input_keys if key != "attention_mask"]
        super().__init__(pad_token_id, (*keys, "position_ids"))
        self.model_input_keys = tuple(key for key in self.model_input_keys if key != "attention_mask")

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        positions = torch.stack([item["position_ids"] for item in items], dim=1)
        real = torch.tensor([item["num_real_tokens"] for item in items])
        rest = [{k: v for k, v in item.items() if k not in ("position_ids", "num_real_tokens")} for item in items]
        batch = super().__call__(rest)
        batch.pop("attention_mask")
        batch["num_real_tokens"] = real
        batch["position_ids"] = positions
        return batch

    def split(self, batch: Mapping[str, Any], rows_per_micro_batch: int) -> list[dict[str, torch.Tensor]]:
        """As ``ProcessedVLCollator.split``, with the rope positions cut along their row dimension."""
        positions = batch["position_ids"]
        rest = {key: value for key, value in batch.items() if key != "position_ids"}
        micro_batches = super().split(rest, rows_per_micro_batch)
        start = 0
        for micro in micro_batches:
            rows = micro["input_ids"].shape[0]
            micro["position_ids"] = positions[:, start : start + rows]
            start += rows
        return micro_batches
