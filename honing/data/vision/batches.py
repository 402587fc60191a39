"""Batches of vision-language rows.

``VLCollator`` (padded rows) keeps each row's stored ids, labels, rendered text and loaded images, and runs
the processor once per micro-batch when the batch is split: one call for many rows costs little more than
one call for one row, and the processor's own batching (Molmo2's index shifts, Idefics3's per-row image
stacks) is used as it is. The ids it gives are checked against the stored ones. For a family whose processor
adds nothing to the text but token types (Qwen-VL: ``mm_token_type_ids``, 1 at image tokens), only the image
processor runs and the types come from the stored ids, whose image tokens are checked against the image grid.

``ProcessedVLCollator`` (packed rows, processed per document): token-shaped fields (ids, labels, masks,
``mm_token_type_ids``) are right-padded to the longest row.
Image-shaped fields are concatenated on their first dimension whatever it means for the family:
Qwen-VL's ``pixel_values`` are the patches of every image (sized by ``image_grid_thw``, one row per
image), LLaVA's one entry per image, Idefics3's one entry per row. Each row's share of every such field
is recorded, so a micro-batch takes exactly its rows' images. Index fields into the flattened pixels
(Molmo2's ``image_token_pooling``) are shifted to the concatenation, and back for each micro-batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from honing.data.collate import PadCollator
from honing.data.vision.causal_masks import causal_padding_mask
from honing.data.vision.image_tensors import CHANNELS_FIRST, channel_first_images, qwen_patches
from honing.data.vision.rope_positions import image_rope_positions, vision_rope_positions
from honing.errors import DataError

if TYPE_CHECKING:
    from transformers import ProcessorMixin

#: the batch key holding, per image field, each row's number of entries along the field's first dimension
SHARES = "image_shares"
#: the micro-batch key of the model's 4-D causal mask, built in the collator (``VLCollator.sdpa_masks``)
CAUSAL_MASK = "causal_mask"


class ProcessedVLCollator(PadCollator):
    """Pads token fields and concatenates image fields of processed rows; splits both by row for micro-batches."""

    def __init__(self, pad_token_id: int | None, model_input_keys: Sequence[str], *, index_keys: Sequence[str] = ()):
        super().__init__(pad_token_id)
        self.model_input_keys = tuple(dict.fromkeys(("input_ids", "attention_mask", *model_input_keys)))
        self.index_keys = tuple(index_keys)  # fields of indices into the flattened pixel_values (-1: none)

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        batch = super().__call__(items)  # input_ids, labels, attention_mask, num_real_tokens
        width = batch["input_ids"].shape[1]
        token_keys = [key for key in items[0] if key not in batch and _is_token_field(items[0], key)]
        for key in token_keys:
            padded = torch.zeros((len(items), width), dtype=items[0][key].dtype)
            for i, item in enumerate(items):
                padded[i, : len(item[key])] = item[key]
            batch[key] = padded
        image_keys = sorted({key for item in items for key in item if key not in batch and key != "labels"})
        shares: dict[str, torch.Tensor] = {}
        for key in image_keys:
            present = [item[key] for item in items if key in item]
            shares[key] = torch.tensor([len(item[key]) if key in item else 0 for item in items])
            if key in self.index_keys:
                starts = self._pixel_starts(items)
                present = [_shift(item[key], start) for item, start in zip(items, starts) if key in item]
            batch[key] = _concatenate(present)
        batch[SHARES] = shares
        return batch

    @staticmethod
    def _pixel_starts(items: Sequence[Mapping[str, Any]]) -> list[int]:
        """Where each row's pixels start in the batch's flattened pixel_values (patches of all crops)."""
        starts, total = [], 0
        for item in items:
            starts.append(total)
            pixels = item.get("pixel_values")
            total += 0 if pixels is None else int(pixels.shape[:-1].numel())
        return starts

    def split(self, batch: Mapping[str, Any], rows_per_micro_batch: int) -> list[dict[str, torch.Tensor]]:
        """Micro-batches of whole rows, each with exactly its rows' image entries."""
        rows = self.num_rows(batch)
        size = max(1, min(rows_per_micro_batch, rows))
        shares: Mapping[str, torch.Tensor] = batch.get(SHARES, {})
        offsets = {key: torch.cat([torch.zeros(1, dtype=torch.long), share.cumsum(0)]) for key, share in shares.items()}
        micro_batches = []
        for start in range(0, rows, size):
            stop = min(start + size, rows)
            micro = {
                key: value[start:stop]
                for key, value in batch.items()
                if isinstance(value, torch.Tensor) and key not in shares
            }
            for key, offset in offsets.items():
                first, last = int(offset[start]), int(offset[stop])
                if last > first:  # a micro-batch without images passes no image field
                    micro[key] = batch[key][first:last]
            if self.index_keys and "pixel_values" in batch:
                # indices count from the micro-batch's first pixel, as they did in its rows
                skipped = int(offsets["pixel_values"][start]) * int(batch["pixel_values"].shape[1:-1].numel())
                for key in self.index_keys:
                    if key in micro:
                        micro[key] = _shift(micro[key], -skipped)
            micro_batches.append(micro)
        return micro_batches


class VLCollator(PadCollator):
    """Rows of stored ids and labels plus their text and images; each micro-batch is processed in one call."""

    def __init__(
        self,
        processor: ProcessorMixin,
        pad_token_id: int | None,
        model_input_keys: Sequence[str],
        *,
        image_token_id: int | None = None,
    ):
        super().__init__(pad_token_id)
        self.processor = processor
        # set: image processor only, token types from the ids and rope positions from them and the grids
        # (``VLFamily.image_only_batches``)
        self.image_token_id = image_token_id
        positions = ("position_ids", "image_position_ids") if image_token_id is not None else ()
        self.model_input_keys = tuple(dict.fromkeys(("input_ids", "attention_mask", *model_input_keys, *positions)))
        #: set by the recipe when the model attends with sdpa: a padded micro-batch with rope positions also gets
        #: the model's 4-D causal mask (``causal_padding_mask``), which the model takes instead of building it
        self.sdpa_masks = False
        #: whether ``qwen_patches`` gives what the image processor's call does (None: not checked yet)
        self.direct_patches: bool | None = None

    def model_inputs(self, micro_batch: Mapping[str, Any]) -> dict[str, Any]:
        """The forward's keywords; the 4-D causal mask, where the micro-batch has one, as its attention mask."""
        inputs = super().model_inputs(micro_batch)
        if CAUSAL_MASK in micro_batch:
            inputs["attention_mask"] = micro_batch[CAUSAL_MASK]
        return inputs

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        batch = super().__call__(items)  # input_ids, labels, attention_mask, num_real_tokens
        batch["texts"] = [item["text"] for item in items]
        batch["images"] = [list(item["images"]) for item in items]
        return batch

    def split(self, batch: Mapping[str, Any], rows_per_micro_batch: int) -> list[dict[str, torch.Tensor]]:
        """Micro-batches of whole rows, each processed (pixels, grids, token types) in one processor call."""
        rows = self.num_rows(batch)
        size = max(1, min(rows_per_micro_batch, rows))
        return [self.process(batch, start, min(start + size, rows)) for start in range(0, rows, size)]

    def process(self, batch: Mapping[str, Any], start: int, stop: int) -> dict[str, torch.Tensor]:
        """Rows ``start:stop`` of the batch with the processor's fields; stored ids and labels win."""
        lengths = batch["num_real_tokens"][start:stop]
        width = int(lengths.max())
        micro = {key: batch[key][start:stop, :width] for key in ("input_ids", "labels", "attention_mask")}
        micro["num_real_tokens"] = lengths
        images = [image for row in batch["images"][start:stop] for image in row]
        if self.image_token_id is not None:
            return self._with_images_only(micro, batch["images"][start:stop])
        kwargs: dict[str, Any] = {"images": images} if images else {}
        encoding = self.processor(
            text=batch["texts"][start:stop], padding=True, padding_side="right", return_tensors="pt", **kwargs
        )
        ids = encoding["input_ids"]
        if ids.shape[1] < width or not torch.equal(
            torch.where(micro["attention_mask"].bool(), ids[:, :width], 0),
            torch.where(micro["attention_mask"].bool(), micro["input_ids"], 0),
        ):
            raise DataError("the processor gave other token ids than when the data set was built")
        for key, value in encoding.items():
            if key in micro or key == "input_ids" or not isinstance(value, torch.Tensor):
                continue
            if value.dim() == 2 and value.shape == ids.shape:  # per token: cut as the rows were, pads zeroed
                micro[key] = torch.where(micro["attention_mask"].bool(), value[:, :width], 0)
            else:
                micro[key] = value
        return micro

    def _image_inputs(self, images: Sequence[object]) -> Mapping[str, torch.Tensor]:
        """``pixel_values`` and ``image_grid_thw`` of a micro-batch's images: from the image processor's own steps
        on a stack per image size (``qwen_patches``) once its first result equalled the processor's call, else from
        the call, with images of one size resized and normalized as one stack (transformers does each alone on
        CPU: the same numbers) and RGB ones handed over as tensors converted together (``channel_first_images``)."""
        image_processor = self.processor.image_processor
        direct = qwen_patches(image_processor, images) if self.direct_patches is not False else None
        if direct is not None and self.direct_patches:
            return direct
        tensors = channel_first_images(images)
        layout = CHANNELS_FIRST if tensors is not None else {}
        encoding = image_processor(
            images=images if tensors is None else tensors, return_tensors="pt", disable_grouping=False, **layout
        )
        if direct is not None:  # the first check decides for the run: the processor and its settings are fixed
            self.direct_patches = all(torch.equal(direct[key], encoding[key]) for key in direct)
        return encoding

    def _with_images_only(self, micro: dict[str, torch.Tensor], rows: Sequence[Sequence[Any]]) -> dict[str, Any]:
        """``micro`` with the image processor's fields, token types read off the stored ids and, when it holds
        images, the model's 3-D rope positions and its vision tower's patch positions (``image_rope_positions``,
        ``vision_rope_positions``: what the forward would compute, several times cheaper); each row must hold as
        many image tokens as its images' grids give (the processor's expansion, done when the data was built)."""
        image_tokens = (micro["input_ids"] == self.image_token_id) & micro["attention_mask"].bool()
        micro["mm_token_type_ids"] = image_tokens.long()  # as the processor gives it
        images = [image for row in rows for image in row]
        expected, grids = [0] * len(rows), []
        if images:
            encoding = self._image_inputs(images)
            merge = int(getattr(self.processor.image_processor, "merge_size", 1))
            # listed once for the count below and both rope positions: a few small ints, cheaper than torch ops
            grids = encoding["image_grid_thw"].tolist()
            tokens = iter(t * h * w // merge**2 for t, h, w in grids)
            expected = [sum(next(tokens) for _ in row) for row in rows]
            micro.update(pixel_values=encoding["pixel_values"], image_grid_thw=encoding["image_grid_thw"])
        found = image_tokens.sum(1).tolist()
        if found != expected:
            raise DataError(
                f"rows hold {found} image tokens but their images give {expected}: "
                "the images or the image processor changed since the data set was built"
            )
        if images:
            micro["position_ids"] = image_rope_positions(image_tokens, micro["attention_mask"], grids, merge)
            micro["image_position_ids"] = vision_rope_positions(grids, merge)
            # the model reads the 2-D mask only for rope positions, given above; unpadded rows keep it (see
            # ``honing.data.vision.causal_masks``)
            if self.sdpa_masks and int(micro["num_real_tokens"].min()) < micro["input_ids"].shape[1]:
                micro[CAUSAL_MASK] = causal_padding_mask(micro["attention_mask"])
        return micro


def _shift(indices: torch.Tensor, by: int) -> torch.Tensor:
    """``indices + by`` where an index is set (>= 0); -1 marks an empty slot and stays."""
    return torch.where(indices >= 0, indices + by, indices)


def _is_token_field(item: Mapping[str, Any], key: str) -> bool:
    value = item[key]
    return isinstance(value, torch.Tensor) and value.dim() == 1 and len(value) == len(item["input_ids"])


def _concatenate(values: list[torch.Tensor]) -> torch.Tensor:
    """Concatenated on dim 0; entries of different trailing sizes (per-row image stacks) are zero-padded,
    which families with per-row stacks (Idefics3, SmolVLM) skip as padding images."""
    shape = [max(sizes) for sizes in zip(*(value.shape[1:] for value in values))]
    if all(list(value.shape[1:]) == shape for value in values):
        return torch.cat(values)
    padded = []
    for value in values:
        out = value.new_zeros((value.shape[0], *shape))
        out[tuple(slice(0, size) for size in value.shape)] = value
        padded.append(out)
    return torch.cat(padded)
