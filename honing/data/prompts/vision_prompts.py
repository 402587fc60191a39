"""Prompts with images for GRPO on vision-language models (``method: vl_grpo``): the rows, their images through the
model's own processor, and batches that carry each prompt's pixel inputs beside its left-padded ids.

Row formats (each row's other keys are kept as columns for the rewards):

- ``prompt``: ``{"prompt": [messages] | "text", "images": [...], ...}``. Messages hold image content items
  (``{"type": "image_path", "content": "a.png"}``) or ``<image>`` placeholders filled in order from ``images``
  (verl's geometry rows: ``prompt`` + ``images`` + ``reward_model.ground_truth``; LLaMA-Factory's and TRL's
  ``images`` lists). A text prompt with images and no placeholder gets them before its text.
- ``conversation``: ``{"messages": [...], "images": [...]}``: the last assistant turn is removed and kept as the
  column ``answer``.

An ``images`` entry is a path or URL (relative paths are read beside the data file), ``{"path": ...}``,
``{"image": ...}`` (verl / qwen-vl-utils) or ``{"bytes": ...}`` (a Parquet image column). Images are opened when
the rows are built: a missing or unreadable one rejects its row, and the run stops naming the file, line and image.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from honing.data.formats import (
    IMAGE_PLACEHOLDER,
    ContentItem,
    Conversation,
    Message,
    RowError,
    _fill_placeholders,
    _messages,
    _mllm_image,
    resolve_image_paths,
)
from honing.data.prompts.prompt_rows import PromptRows, check_json_columns
from honing.data.prompts.prompts import PROMPT_FORMATS, Prompt, PromptCollator, PromptDataset, detect_prompt_format
from honing.data.row_reader import BadRowReport, RowItems, SourceKind, named_format, read_items
from honing.data.vision.image_rows import ImageRowsMixin
from honing.data.vision.processing import ImageInputKeys, process
from honing.data.vision.vision_rows import image_columns, image_stamps
from honing.errors import DataError

if TYPE_CHECKING:
    from PIL.Image import Image
    from transformers import ProcessorMixin

    from honing.config.data_schema import DataSection

#: the batch key holding each prompt's pixel inputs (a dict of the processor's tensors, one per row)
IMAGE_INPUTS = "image_inputs"


@dataclass
class VisionPrompt(Prompt):
    """A prompt whose messages may hold images: the text the rewards see, the rendered chat and the image items."""

    text: str = ""  # the chat rendered with the generation prompt, image placeholders unexpanded
    images: list[dict[str, Any]] = field(default_factory=list)  # the image items (references), in slot order


def vision_prompt(row: Mapping[str, Any], format: str, folder: str | None) -> tuple[Conversation, dict[str, Any]]:
    """The prompt conversation a row holds (images resolved beside ``folder``) and its columns; RowError if bad."""
    row_format = detect_prompt_format(row) if format == "auto" else format
    key = "prompt" if row_format == "prompt" else "messages"
    if key not in row:
        raise RowError(f"missing key {key!r} (found {', '.join(map(repr, row)) or 'no keys'})")
    images = [_image_item(image, f"images[{i}]") for i, image in enumerate(_image_list(row.get("images")))]
    value = row[key]
    if isinstance(value, str) and row_format == "prompt":
        if not value:
            raise RowError("'prompt' is an empty string")
        value = [
            {
                "role": "user",
                "content": value if IMAGE_PLACEHOLDER in value else IMAGE_PLACEHOLDER * len(images) + value,
            }
        ]
    messages = _messages(value, key)
    columns = {name: item for name, item in row.items() if name not in (key, "images", "metadata")}
    metadata = row.get("metadata")
    if isinstance(metadata, Mapping):
        columns = {**metadata, **columns}
    messages = _placed(messages, images, key)
    if row_format == "conversation" and messages[-1].role == "assistant":
        columns.setdefault("answer", messages[-1].text())
        messages = messages[:-1]
    if not messages:
        raise RowError(f"{key!r} holds only an assistant turn; a prompt needs a message before it")
    conversation = Conversation(messages=messages)
    if folder is not None:
        conversation = resolve_image_paths(conversation, folder)
    return conversation, columns


def _image_list(images: object) -> list[object]:
    if images is None:  # absent, or a null table cell: a text-only prompt
        return []
    if not isinstance(images, list):
        raise RowError(f"'images' must be a list of images, got {type(images).__name__}")
    return images


def _image_item(image: object, where: str) -> ContentItem:
    if isinstance(image, Mapping) and isinstance(image.get("image"), str):
        image = image["image"]  # verl's and qwen-vl-utils' {"image": "file://..." | path}
    if isinstance(image, str) and image.startswith("file://"):
        image = image[len("file://") :]
    return _mllm_image(image, where)


def _placed(messages: list[Message], images: list[ContentItem], key: str) -> list[Message]:
    """``messages`` with each ``<image>`` placeholder replaced by the next of ``images`` (the counts must match)."""
    placeholders = sum(message.text().count(IMAGE_PLACEHOLDER) for message in messages)
    if placeholders != len(images):
        raise RowError(
            f"row has {placeholders} {IMAGE_PLACEHOLDER} placeholder(s) in {key!r} but {len(images)} image(s) in "
            "'images'; each placeholder takes the next image, so the counts must be equal"
        )
    if not images:
        return messages
    pending = iter(images)
    placed = []
    for message in messages:
        filled = [piece for part in message.items() for piece in _fill_placeholders(part, pending)]
        placed.append(message if filled == message.items() else Message(role=message.role, content=filled))
    return placed


#: a prompt conversation (its images resolved) and the row's other columns, for the rewards
PromptParts = tuple[Conversation, dict[str, Any]]


def _prompt_items(fields: dict[str, Any], index: int) -> RowItems[PromptParts]:
    """A source's row → its prompt and columns; ``mllm`` (LLaMA-Factory's image rows) reads as ``auto``."""
    named = {**fields, "format": "auto"} if fields["format"] == "mllm" else fields
    format = named_format(named, index, PROMPT_FORMATS, "prompts") or "auto"
    return lambda record: [vision_prompt(record.row, format, record.folder)]


#: GRPO's prompts whose messages may hold images
VISION_PROMPTS = SourceKind("prompts", ("prompts", "conversations", "image conversations"), _prompt_items)


def read_vision_prompt_sources(sources: Sequence[Mapping[str, Any] | object]) -> list[list[tuple[PromptParts, str]]]:
    """Each source's ``((conversation, columns), origin)`` in file order (at most ``max_samples``); a bad row fails
    with its ``file:line``."""
    return read_items(sources, VISION_PROMPTS, bad_rows=None)[0]


class VisionPromptRows(ImageRowsMixin, PromptRows):
    """Image prompts → the processor's expanded ids (images opened now: a bad one rejects its row), the rendered
    chat and the image references → left-padded batches with each prompt's pixel inputs."""

    method = "vl_grpo"

    def __init__(
        self,
        processor: ProcessorMixin,
        chat_template: str,
        data: DataSection,
        *,
        family: ImageInputKeys,
        **options: Any,
    ):
        super().__init__(processor.tokenizer, chat_template, data, **options)
        self.processor, self.family = processor, family

    def stamps(self, fields: list[dict[str, Any]]) -> list[str]:
        """The local image files the prompts name, with their sizes and modification times."""
        return image_stamps(
            [[(conversation, origin) for (conversation, _), origin in found] for found in self.read(fields)[0]]
        )

    def read(self, fields: list[dict[str, Any]]) -> tuple[list[list[tuple[PromptParts, str]]], BadRowReport]:
        """Each source's image prompts and origins in file order (a bad row fails: GRPO has no data.bad_rows)."""
        return read_vision_prompt_sources(fields), BadRowReport()

    def build_one(self, item: PromptParts) -> dict[str, Any]:
        """One prompt's row: its expanded ids (its images opened and processed now), the text messages the rewards
        read, its columns, the rendered chat and the image references."""
        conversation, columns = item
        messages, image_items = conversation.to_vl_messages()
        images = [self.load_image(image) for image in image_items]
        text = self.processor.apply_chat_template(
            messages,
            chat_template=self.chat_template,
            tokenize=False,
            add_generation_prompt=True,
            **self.data.chat_template_kwargs,
        )
        ids = process(self.processor, text, images, {})["input_ids"][0].tolist()
        prompt = [{"role": message.role, "content": message.text()} for message in conversation.messages]
        if self.data.cache_rows:
            check_json_columns(Prompt(prompt, columns))
        return {
            "prompt_ids": ids,
            "prompt": prompt,
            "columns": columns,
            **image_columns(text, image_items),
        }

    def fitted_prompt(self, row: Mapping[str, Any]) -> VisionPrompt:
        """The prompt of a built row, with its rendered chat and image references."""
        return VisionPrompt(row["prompt"], row["columns"], text=row["text"], images=list(row["images"]))

    def dataset(
        self, fitted: tuple[list[VisionPrompt], list[list[int]]], report: None
    ) -> tuple[PromptDataset, PromptCollator]:
        """The prompts with their ids and images (opened per batch), collated with their pixel inputs."""
        dataset = VisionPromptDataset(*fitted, load_image=self.load_image)
        return dataset, VisionPromptCollator(self.processor, self.family, self.tokenizer.pad_token_id)


class VisionPromptDataset(PromptDataset):
    """Tokenized image prompts: each item also its rendered chat and its images, opened when it is read."""

    def __init__(
        self,
        prompts: Sequence[VisionPrompt],
        token_ids: Sequence[Sequence[int]],
        *,
        load_image: Callable[[ContentItem], Image],
    ):
        super().__init__(prompts, token_ids)
        self.load_image = load_image

    def __getitem__(self, index: int) -> dict[str, Any]:
        item = super().__getitem__(index)
        prompt = self.prompts[index]
        item["text"] = prompt.text
        item["images"] = [self.load_image(ContentItem(**image)) for image in prompt.images]
        return item


class VisionPromptCollator(PromptCollator):
    """Left-pads the prompts as ``PromptCollator`` does and adds ``image_inputs``: per prompt, the processor's
    model inputs for its images (per-token ones, such as Qwen-VL's ``mm_token_type_ids``, over its own ids)."""

    def __init__(self, processor: ProcessorMixin, family: ImageInputKeys, pad_token_id: int | None):
        super().__init__(pad_token_id)
        self.processor, self.family = processor, family
        self.model_input_keys = tuple(dict.fromkeys(("input_ids", "attention_mask", *family.model_input_keys)))

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        batch = super().__call__(items)
        batch[IMAGE_INPUTS] = [self.image_inputs(item) for item in items]
        return batch

    def image_inputs(self, item: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """One prompt's image inputs, its ids checked against the processor's (they were stored when built)."""
        images, ids = item["images"], list(item["input_ids"])
        if not images:
            return {}
        encoding = process(self.processor, item["text"], images, {})
        if encoding["input_ids"][0].tolist() != ids:
            raise DataError(
                f"prompt {item['index']}: the processor gave other token ids than when the data set was built "
                "(the images or the processor changed)"
            )
        out = {}
        for key in self.family.model_input_keys:
            value = encoding.get(key)
            if isinstance(value, torch.Tensor):
                out[key] = value[0] if key in self.family.per_token_keys else value
        return out
