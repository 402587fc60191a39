"""Vision-language rows: a conversation with images through the model's own processor, loss on the reply text only.

The processor (``AutoProcessor``: image processor, tokenizer and chat template) turns each image placeholder
of the rendered chat into the image's tokens. The labels come from the text alone: the conversation is
tokenized without images by ``honing.data.chat.conversation`` (assistant-only masks, as in text SFT), then aligned with
the processor's ids. Tokens the processor inserted (image tokens, wrappers, a BOS) match nothing in the text
and never get a loss, whatever the family's expansion looks like.

Rows keep their rendered text and image references, not pixels: a row's images are loaded and processed
again when it is batched (the processor is deterministic, and the ids are checked), so memory holds no
pixel tensors for the whole data set.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch

from honing.data.chat.conversation import Messages, TokenizedExample, render_chat, tokenize_conversation
from honing.errors import DataError
from honing.losses import IGNORE_INDEX

if TYPE_CHECKING:
    from transformers import ProcessorMixin

#: loads one image item of a row (``honing.data.vision.images.load_image``; tests pass their own)
ImageLoader = Callable[[Any], Any]


class ImageInputKeys(Protocol):
    """What batches need of a VL model family (``honing.models.vl_families.VLFamily`` is one; data imports no
    models): the processor outputs the model's forward takes besides the ids and mask, and those laid out per token."""

    model_input_keys: tuple[str, ...]
    per_token_keys: tuple[str, ...]


@dataclass
class VLExample:
    """One row's expanded token ids and labels, and what re-creates its pixel inputs when it is batched."""

    input_ids: list[int]
    labels: list[int]
    text: str  # the rendered chat text, image placeholders unexpanded
    images: tuple[Any, ...] = ()  # the row's image items in order, loaded again per batch
    image_tokens: int = 0  # tokens the processor inserted for the images
    pixels_before: list[int] = field(default_factory=list)  # per image: width × height as loaded
    pixels_after: list[int] = field(default_factory=list)  # per image: as the processor resized it, if known


def image_token_ids(processor: ProcessorMixin) -> set[int]:
    """The ids a processor uses for image content (the placeholder it expands and its per-patch tokens)."""
    tokenizer = getattr(processor, "tokenizer", processor)
    listed = getattr(processor, "image_token_ids", None)  # transformers 5: every id of image content (Molmo2 has 8)
    ids = {int(i) for i in listed} if isinstance(listed, (list, tuple, set)) else set()
    for name in ("image_token_id", "image_pad_token_id", "image_patch_token_id"):
        value = getattr(processor, name, None)
        if isinstance(value, int):
            ids.add(value)
    for name in ("image_token", "image_pad_token", "image_patch_token"):
        token = getattr(processor, name, None) or getattr(tokenizer, name, None)
        if isinstance(token, str):
            token_id = tokenizer.convert_tokens_to_ids(token)
            if isinstance(token_id, int) and token_id != tokenizer.unk_token_id:
                ids.add(token_id)
    return ids


def process(
    processor: ProcessorMixin, text: str, images: Sequence[Any], processor_kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """The processor's tensors for one row (batch dimension 1)."""
    kwargs = dict(processor_kwargs)
    if images:
        kwargs["images"] = list(images)
    try:
        return dict(processor(text=[text], return_tensors="pt", **kwargs))
    except (ValueError, TypeError, RuntimeError) as error:
        raise DataError(f"the processor could not process the row: {error}") from error


def tokenize_vl_conversation(
    processor: ProcessorMixin,
    messages: Messages,
    images: Sequence[Any],
    *,
    chat_template: str,
    train_on: str = "assistant",
    processor_kwargs: Mapping[str, Any] | None = None,
) -> tuple[VLExample, dict[str, Any]]:
    """The row's expanded ids and labels (loss on assistant text only) and the processor's tensors for it."""
    tokenizer = getattr(processor, "tokenizer", processor)
    text = render_chat(tokenizer, messages, chat_template=chat_template)
    plain = tokenize_conversation(tokenizer, messages, chat_template=chat_template, train_on=train_on)
    encoding = process(processor, text, images, processor_kwargs or {})
    expanded = encoding["input_ids"][0].tolist()
    type_ids = _type_ids(encoding)
    example = _example(processor, text, plain, expanded, None if type_ids is None else type_ids[0].tolist(), images)
    example.pixels_after = _processed_pixels(encoding, len(images))
    return example, encoding


def tokenize_vl_conversations(
    processor: ProcessorMixin,
    rows: Sequence[tuple[Messages, Sequence[Any]]],
    *,
    chat_template: str,
    train_on: str = "assistant",
    chunk_size: int = 64,
) -> list[VLExample | DataError]:
    """``tokenize_vl_conversation`` for many rows, ``chunk_size`` rows per processor call (a call's overhead is
    most of a small row's cost); each row's result, or the DataError that refused it."""
    tokenizer = getattr(processor, "tokenizer", processor)
    out: list[VLExample | DataError] = []
    for start in range(0, len(rows), chunk_size):
        chunk = rows[start : start + chunk_size]
        prepared: list[tuple[str, Any] | DataError] = []
        for messages, _ in chunk:
            try:
                text = render_chat(tokenizer, messages, chat_template=chat_template)
                plain = tokenize_conversation(tokenizer, messages, chat_template=chat_template, train_on=train_on)
                prepared.append((text, plain))
            except DataError as error:
                prepared.append(error)
        ready = [i for i, item in enumerate(prepared) if not isinstance(item, DataError)]
        images = [image for i in ready for image in chunk[i][1]]
        try:
            kwargs: dict[str, Any] = {"images": images} if images else {}
            texts = [prepared[i][0] for i in ready]  # type: ignore[index]
            encoding = dict(processor(text=texts, padding=True, return_tensors="pt", **kwargs)) if texts else {}
        except (ValueError, TypeError, RuntimeError):
            # one row spoils the call: process them one by one so each error names its row
            for (messages, row_images), item in zip(chunk, prepared):
                if isinstance(item, DataError):
                    out.append(item)
                    continue
                try:
                    example, _ = tokenize_vl_conversation(
                        processor, messages, row_images, chat_template=chat_template, train_on=train_on
                    )
                    out.append(example)
                except DataError as error:
                    out.append(error)
            continue
        grids = _grid_rows(encoding, [len(chunk[i][1]) for i in ready])
        results: dict[int, VLExample | DataError] = {}
        for row, i in enumerate(ready):
            text, plain = prepared[i]  # type: ignore[misc]
            real = encoding["attention_mask"][row].bool()
            expanded = encoding["input_ids"][row][real].tolist()
            type_ids = _type_ids(encoding)
            types = None if type_ids is None else type_ids[row][real].tolist()
            try:
                results[i] = _example(processor, text, plain, expanded, types, chunk[i][1])
                results[i].pixels_after = grids[row]  # type: ignore[union-attr]
            except DataError as error:
                results[i] = error
        out.extend(results.get(i, item) for i, item in enumerate(prepared))  # type: ignore[misc]
    return out


def _example(
    processor: ProcessorMixin,
    text: str,
    plain: TokenizedExample,
    expanded: list[int],
    type_ids: list[int] | None,
    images: Sequence[Any],
) -> VLExample:
    blocked = image_token_ids(processor)
    # a placeholder the processor replaces by other tokens (Molmo2's <|image|>) is not in the expansion to carry a
    # label onto: image content never trains, so under train_on: all its plain label goes before the alignment
    plain_labels = [IGNORE_INDEX if token in blocked else label for token, label in zip(plain.input_ids, plain.labels)]
    labels = align_labels(plain.input_ids, plain_labels, expanded)
    image_positions = {i for i, token in enumerate(expanded) if token in blocked}
    if type_ids is not None and len(type_ids) == len(expanded):
        image_positions |= {i for i, kind in enumerate(type_ids) if kind != 0}
    for position in image_positions:
        labels[position] = IGNORE_INDEX  # image tokens never get loss, also under train_on: all
    return VLExample(
        input_ids=expanded,
        labels=labels,
        text=text,
        image_tokens=len(image_positions),
        pixels_before=[image.width * image.height for image in images],
    )


def _type_ids(encoding: Mapping[str, Any]) -> Any:
    type_ids = encoding.get("mm_token_type_ids")
    return encoding.get("token_type_ids") if type_ids is None else type_ids


def _grid_rows(encoding: Mapping[str, Any], images_per_row: Sequence[int]) -> list[list[int]]:
    """Processed pixels per image, split by row (Qwen-VL's grids; empty lists where unknown)."""
    pixels = _processed_pixels(encoding, sum(images_per_row))
    if not pixels:
        return [[] for _ in images_per_row]
    out, start = [], 0
    for count in images_per_row:
        out.append(pixels[start : start + count])
        start += count
    return out


def align_labels(plain_ids: Sequence[int], plain_labels: Sequence[int], expanded_ids: Sequence[int]) -> list[int]:
    """``plain_labels`` carried onto ``expanded_ids``; tokens only in the expansion get no loss.

    A linear walk handles expansions that only insert tokens (Qwen-VL repeats the placeholder); a
    sequence alignment handles those that replace the placeholder by other tokens. Every labelled text
    token must be found, else the row is refused: a silently shifted label would train the wrong token.
    """
    mapping = _insertions_only(plain_ids, expanded_ids)
    if mapping is None:
        mapping = _aligned(plain_ids, expanded_ids)
    labels = [IGNORE_INDEX] * len(expanded_ids)
    for plain_index, label in enumerate(plain_labels):
        if label == IGNORE_INDEX:
            continue
        target = mapping.get(plain_index)
        if target is None:
            raise DataError(
                f"the processor's token ids do not contain the text token at position {plain_index} "
                f"(id {plain_ids[plain_index]}) that carries a loss; its tokenizer and chat template disagree"
            )
        labels[target] = label
    return labels


def _insertions_only(plain: Sequence[int], expanded: Sequence[int]) -> dict[int, int] | None:
    mapping, j = {}, 0
    for i, token in enumerate(plain):
        while j < len(expanded) and expanded[j] != token:
            j += 1
        if j == len(expanded):
            return None
        mapping[i] = j
        j += 1
    return mapping


def _aligned(plain: Sequence[int], expanded: Sequence[int]) -> dict[int, int]:
    matcher = difflib.SequenceMatcher(a=list(plain), b=list(expanded), autojunk=False)
    mapping = {}
    for block in matcher.get_matching_blocks():
        for offset in range(block.size):
            mapping[block.a + offset] = block.b + offset
    return mapping


def _processed_pixels(encoding: Mapping[str, Any], num_images: int) -> list[int]:
    grid = encoding.get("image_grid_thw")
    if grid is not None and len(grid) == num_images:
        patch = 14  # Qwen-VL's grid counts 14-pixel patches
        return [int(t * h * w) * patch * patch for t, h, w in grid.tolist()]
    pixels = encoding.get("pixel_values")
    if isinstance(pixels, torch.Tensor) and pixels.dim() >= 4 and num_images:
        height, width = pixels.shape[-2:]
        return [int(height * width)] * num_images
    return []


class VLDataset(torch.utils.data.Dataset):
    """Rows whose pixel inputs are re-created from their images when batched (nothing pixel-sized is kept)."""

    def __init__(
        self,
        examples: Sequence[VLExample],
        processor: ProcessorMixin,
        load_image: ImageLoader,
        processor_kwargs: Mapping[str, Any] | None = None,
    ):
        self.examples = list(examples)
        self.processor = processor
        self.load_image = load_image
        self.processor_kwargs = dict(processor_kwargs or {})

    @property
    def lengths(self) -> list[int]:
        """Each row's token count (for length-grouped batches)."""
        return [len(example.input_ids) for example in self.examples]

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> dict[str, Any]:
        """The row's stored ids and labels, its rendered text and its loaded images (``VLCollator`` processes
        a micro-batch of such rows in one processor call)."""
        example = self.examples[index]
        return {
            "input_ids": example.input_ids,
            "labels": example.labels,
            "text": example.text,
            "images": [self.load_image(item) for item in example.images],
        }

    def processed(self, index: int) -> dict[str, Any]:
        """The row processed alone: its ids, labels and every processor field (packed rows are built of these)."""
        example = self.examples[index]
        images = [self.load_image(item) for item in example.images]
        encoding = process(self.processor, example.text, images, self.processor_kwargs)
        length = len(example.input_ids)
        ids = encoding["input_ids"][0]
        if ids[:length].tolist() != example.input_ids:
            raise DataError(f"row {index}: the processor gave other token ids than when the data set was built")
        row: dict[str, Any] = {"labels": torch.tensor(example.labels, dtype=torch.long)}
        for key, value in encoding.items():
            if not isinstance(value, torch.Tensor):
                continue
            if value.dim() >= 2 and value.shape[0] == 1 and value.shape[1] == len(ids):
                row[key] = value[0, :length]  # per-token (ids, masks, token types), cut as the row was
            else:
                row[key] = value  # per-image (pixels, grids): the collator concatenates them
        return row
