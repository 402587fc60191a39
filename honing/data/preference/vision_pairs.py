"""DPO's pairs whose prompt holds images (``method: vl_dpo``): the rows, their images through the model's processor.

Row shapes (one reader; the prompt's key and the images' key say which):

- TRL's vision DPO rows: ``images`` + ``prompt`` / ``chosen`` / ``rejected``, the prompt a string or messages whose
  content has ``{"type": "image"}`` slots (filled in order from ``images``), the replies strings or messages;
- Oumi's ``vision_dpo_jsonl``: ``prompt`` (a string) + ``images`` (paths or URLs) + ``chosen`` / ``rejected``;
- RLAIF-V (``openbmb/RLAIF-V-Dataset``, Oumi's ``OpenbmbRlaifVDataset``): ``image`` (one image) + ``question`` +
  ``chosen`` / ``rejected`` strings;
- ``messages`` (Oumi's preference rows) in place of ``prompt``.

Images are given as in ``mllm`` rows: a path or URL (relative paths read beside the data file), ``{"path": ...}`` or
``{"bytes": ...}`` (a Parquet image column). A text prompt without
``<image>`` placeholders gets its images before its text. Images are opened when the rows are built: a missing one
rejects its row, and under ``data.bad_rows: fail`` the run stops naming the file, line and image.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from honing.data.formats import IMAGE_PLACEHOLDER, Conversation, RowError, resolve_image_paths, to_example
from honing.data.preference.pairs import PreferencePair, _checked, _completion
from honing.data.preference.preference_rows import PreferenceRows
from honing.data.preference.vision_batches import (
    JoinImages,
    VisionPairCollator,
    VisionPairDataset,
    VisionTokenizedPair,
    fit_vision_pair,
    tokenize_vision_pair,
)
from honing.data.report import DataReport
from honing.data.row_reader import BadRowReport, BadRows, RowItems, SourceKind, named_format, read_items
from honing.data.vision.image_rows import ImageRowsMixin
from honing.data.vision.processing import ImageInputKeys
from honing.data.vision.vision_rows import image_columns, image_stamps

if TYPE_CHECKING:
    from transformers import ProcessorMixin

    from honing.config.data_schema import DataSection

#: the keys a row's prompt may be under, per source format, in the order they are looked for
PROMPT_KEYS = {"auto": ("prompt", "question", "messages"), "preference_prompt": ("prompt", "question")}
PROMPT_KEYS["preference"] = ("messages",)


@dataclass(frozen=True)
class VisionPair:
    """A prompt conversation whose messages may hold images, and two text replies to it, the chosen one preferred."""

    prompt: Conversation
    chosen: list[dict[str, str]]
    rejected: list[dict[str, str]]


def vision_pair(row: Mapping[str, Any], folder: str | None, format: str = "auto") -> VisionPair:
    """The pair a row of ``format`` holds (its images resolved beside ``folder``); a ``RowError`` saying what is
    wrong."""
    for key in ("chosen", "rejected"):
        if key not in row:
            raise RowError(f"missing key {key!r} (keys: {', '.join(map(repr, row)) or 'none'})")
    key = next((name for name in PROMPT_KEYS[format] if name in row), None)
    if key is None:
        expected = ", ".join(map(repr, PROMPT_KEYS[format]))
        raise RowError(f"missing the prompt: expected {expected} beside 'chosen' (format {format!r})")
    images = row.get("images")
    if images is None and row.get("image") is not None:  # RLAIF-V: one image per row
        images = [row["image"]]
    prompt = _image_slots(row[key])
    if isinstance(prompt, str):  # one user message; its images first unless placeholders say where
        slots = "" if IMAGE_PLACEHOLDER in prompt else IMAGE_PLACEHOLDER * len(images or [])
        prompt = [{"role": "user", "content": slots + prompt}]
    if not isinstance(prompt, list) or not prompt:
        raise RowError(f"{key!r} must be a string or a non-empty list of messages")
    chosen, rejected = _completion(row["chosen"], "chosen"), _completion(row["rejected"], "rejected")
    _checked(PreferencePair([], chosen, rejected))
    # LLaMA-Factory's mllm rows place images the same way (placeholders filled in order); the reply completes it
    whole = to_example({"messages": [*prompt, *chosen], "images": images}, "mllm")
    conversation = Conversation(messages=whole.messages[: len(prompt)])  # type: ignore[union-attr]
    if folder is not None:
        conversation = resolve_image_paths(conversation, folder)
    return VisionPair(conversation, chosen, rejected)


def _image_slots(prompt: object) -> object:
    """TRL's ``{"type": "image"}`` content parts (no content: the next of ``images``) as ``<image>`` placeholders."""
    if not isinstance(prompt, list):
        return prompt
    out = []
    for message in prompt:
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, list):
            parts = [
                {"type": "text", "text": IMAGE_PLACEHOLDER}
                if isinstance(part, Mapping) and part.get("type") == "image" and not part.get("content")
                else part
                for part in content
            ]
            message = {**message, "content": parts}
        out.append(message)
    return out


def _pair_items(fields: dict[str, Any], index: int) -> RowItems[VisionPair]:
    """A source's row → its pair, its prompt under the keys the source's format names (``PROMPT_KEYS``)."""
    format = named_format(fields, index, PROMPT_KEYS, "image pairs") or "auto"
    return lambda record: [vision_pair(record.row, record.folder, format)]


#: DPO's pairs whose prompt holds images
VISION_PAIRS = SourceKind("preference pairs", ("preference pairs",), _pair_items)


def read_vision_pair_sources(
    sources: Sequence[Mapping[str, Any] | object], *, bad_rows: BadRows = "fail"
) -> tuple[list[list[tuple[VisionPair, str]]], BadRowReport]:
    """Each source's ``(pair, origin)`` in file order (at most ``max_samples``), and the bad rows skipped."""
    return read_items(sources, VISION_PAIRS, bad_rows=bad_rows)


class VisionPreferenceRows(ImageRowsMixin, PreferenceRows):
    """Image pairs → the prompt's expanded ids (its images opened now: a bad one rejects its row), each reply's ids,
    the rendered prompt and the image references → fitted pairs (the prompt never cut) → side-by-side batches with
    each prompt's pixel inputs."""

    method = "vl_dpo"
    generated_format = "preference"

    def __init__(
        self,
        processor: ProcessorMixin,
        chat_template: str,
        data: DataSection,
        *,
        family: ImageInputKeys,
        join_images: JoinImages,
        **where: Any,
    ):
        collator = VisionPairCollator(processor, family, processor.tokenizer.pad_token_id, join_images=join_images)
        super().__init__(processor.tokenizer, chat_template, data, collator=collator, **where)
        self.processor, self.family = processor, family

    def stamps(self, fields: list[dict[str, Any]]) -> list[str]:
        """The local image files the pairs name, with their sizes and modification times."""
        found = self.read(fields)[0]
        return image_stamps([[(pair.prompt, origin) for pair, origin in items] for items in found])

    def read(self, fields: list[dict[str, Any]]) -> tuple[list[list[tuple[VisionPair, str]]], BadRowReport]:
        """Each source's image pairs and origins in file order, and the bad rows skipped while reading."""
        return read_vision_pair_sources(fields, bad_rows=self.data.bad_rows)

    def build_one(self, pair: VisionPair) -> dict[str, Any]:
        """One pair's row: ids (its images opened and processed now), rendered prompt and image references."""
        messages, image_items = pair.prompt.to_vl_messages()
        images = [self.load_image(item) for item in image_items]
        prompt_ids, chosen_ids, rejected_ids, text = tokenize_vision_pair(
            self.processor, messages, images, pair.chosen, pair.rejected, chat_template=self.chat_template
        )
        return {
            "prompt_ids": prompt_ids,
            "chosen_ids": chosen_ids,
            "rejected_ids": rejected_ids,
            **image_columns(text, image_items),
        }

    def tokenized(self, row: dict[str, Any]) -> VisionTokenizedPair:
        """A stored row's pair of token ids, its rendered prompt and image references."""
        return VisionTokenizedPair(
            row["prompt_ids"], row["chosen_ids"], row["rejected_ids"], text=row["text"], images=list(row["images"])
        )

    def fit_pair(self, pair: VisionTokenizedPair) -> VisionTokenizedPair | None:
        """The pair fitted to ``data.seq_len``: replies cut from the right, never the prompt (its image tokens)."""
        return fit_vision_pair(pair, self.data.seq_len, self.data.overlong)

    def dataset(
        self, fitted: list[VisionTokenizedPair], report: DataReport
    ) -> tuple[VisionPairDataset, VisionPairCollator]:
        """The pairs with their images (opened per batch), batched side by side with their pixel inputs."""
        dataset = VisionPairDataset(fitted, self.load_image)
        report.rows, report.row_length = len(dataset), max(dataset.lengths)
        return dataset, self.collator
