"""VL-SFT's row kind (``VisionRows``): image conversations through the model's own processor, loss on the reply text
only; and vision-language rows as prepared rows keep them, and back: the expanded ids and labels cut at a length
with the row's whole length and where its last image token sits (a later, shorter cut must not split an image), the
rendered text and the image references (never pixels), and the image files' stamps for the cache key."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from honing.cache import content_hash
from honing.data.formats import ContentItem, Conversation
from honing.data.prepared_rows import REJECTED
from honing.data.report import DataReport
from honing.data.row_kind import TemplatedRows
from honing.data.row_reader import BadRowReport
from honing.data.vision.batches import VLCollator
from honing.data.vision.image_transforms import transform_image
from honing.data.vision.images import load_image
from honing.data.vision.packing import PackedVLCollator, VLPackedDataset
from honing.data.vision.processing import VLDataset, VLExample, image_token_ids, tokenize_vl_conversations
from honing.data.vision.source_formats import Found, read_vision_sources, registered_readers
from honing.errors import ConfigError, DataError
from honing.losses import IGNORE_INDEX

if TYPE_CHECKING:
    from PIL import Image
    from transformers import ProcessorMixin

    from honing.config.schema import DataSection
    from honing.data.prepared_rows import PreparedRows
    from honing.data.splits import JoinedRows, MemoryRows


def image_columns(text: str, images: Sequence[ContentItem]) -> dict[str, Any]:
    """The columns through which a built row keeps its images instead of pixels: its rendered text and its image
    references (opened again per batch)."""
    return {"text": text, "images": [image.model_dump() for image in images]}


def vl_row(item: VLExample, images: Sequence[ContentItem], image_ids: set[int], cut: int | None) -> dict[str, Any]:
    """The columns of one built VL example, its ids and labels cut at ``cut`` tokens."""
    ids = item.input_ids
    return {
        "input_ids": ids[:cut],
        "labels": item.labels[:cut],
        "length": len(ids),
        "last_image": max((i for i, token in enumerate(ids) if token in image_ids), default=-1),
        "image_tokens": item.image_tokens,
        **image_columns(item.text, images),
        "pixels_before": item.pixels_before,
        "pixels_after": item.pixels_after,
    }


def fit_vl_row(row: dict[str, Any], seq_len: int, overlong: str) -> tuple[VLExample | None, str]:
    """``(example, "kept")`` if the row fits ``seq_len``; else cut after its last image token (``overlong:
    truncate``: ``"truncated"``) or dropped (``drop``, or nothing left to learn after the cut: ``(None,
    "dropped")``). A cut through an image's tokens, or a row without loss, is a bad row (DataError)."""
    ids, labels, fate = row["input_ids"], row["labels"], "kept"
    if row["length"] <= seq_len:
        if not any(label != IGNORE_INDEX for label in labels):
            raise DataError("no tokens to train on (no assistant turn left after the chat template)")
    elif overlong == "drop":
        return None, "dropped"
    elif row["last_image"] >= seq_len:
        raise DataError(
            f"the row has {row['length']} tokens and its image tokens run to position {row['last_image'] + 1}, "
            f"past data.seq_len ({seq_len}): truncating would cut an image; raise data.seq_len, lower "
            "data.max_pixels, or set data.overlong: drop"
        )
    else:
        ids, labels, fate = ids[:seq_len], labels[:seq_len], "truncated"
        if not any(label != IGNORE_INDEX for label in labels):
            return None, "dropped"  # a valid row that truncation leaves with nothing to learn is over-long, not bad
    example = VLExample(
        input_ids=ids,
        labels=labels,
        text=row["text"],
        images=tuple(ContentItem(**image) for image in row["images"]),
        image_tokens=row["image_tokens"],
        pixels_before=row["pixels_before"],
        pixels_after=row["pixels_after"],
    )
    return example, fate


def image_stamps(found: Sequence[Sequence[tuple[object, str]]]) -> list[str]:
    """Each local image or PDF file the examples name, with its size and modification time: an image changed in
    place changes its rows (token count, pixels), so a cache key holds these. Reading the rows for this costs
    ~15 µs a row, against milliseconds to build one."""
    stamps = []
    for items in found:
        for example, _ in items:
            for image in example.images() if isinstance(example, Conversation) else ():
                if image.type in ("image_path", "pdf") and "://" not in image.content:
                    try:
                        stat = os.stat(image.content)
                    except OSError:
                        continue  # a missing file is a rejected row, found when the rows are built
                    stamps.append(f"{image.content}\t{stat.st_size}\t{stat.st_mtime_ns}")
    return stamps


class VisionRows(TemplatedRows):
    """Image conversations → the processor's ids, assistant-only labels and image references (images opened when
    built, re-processed when batched) → padded rows (length-grouped), or packed ones for a family with per-document
    rope positions. ``family`` is the model family (``honing.models.vl_families.VLFamily``); ``rope_positions``
    gives one packed document's rope positions (None: packing is not asked for, or no model is built)."""

    method = "vl_sft"

    def __init__(
        self,
        processor: ProcessorMixin,
        chat_template: str,
        data: DataSection,
        *,
        family: Any,
        rope_positions: Callable[..., Any] | None = None,
        **where: object,
    ):
        super().__init__(processor.tokenizer, chat_template, data, **where)
        self.processor, self.family, self.rope_positions = processor, family, rope_positions
        self.cut = data.seq_len
        self._read: tuple[str, tuple[list[Found], BadRowReport]] | None = None
        for reader in registered_readers():  # a registered format's options, given with none of its sources
            reader.check(data)

    @property
    def group_by_length(self) -> bool:
        """Padded rows are length-grouped with ``data.group_by_length``; packed ones are not."""
        return self.data.group_by_length and not self.packs()

    def packs(self) -> bool:
        """Whether rows are packed: only when ``data.packing`` is set true (VL rows are padded by default), and
        only for a family with per-document rope positions; otherwise setting it is refused."""
        if "packing" not in self.data.model_fields_set or not self.data.packing:
            return False
        if not self.family.packing:
            raise ConfigError(
                f"data.packing: {self.family.model_type} has no per-document rope positions, so packed image "
                "rows would not train as they do alone; set data.packing: false (rows are padded and length-grouped)"
            )
        return True

    def load_image(self, item: ContentItem) -> Image.Image:
        """One image item as an RGB image; PDF pages at ``data.pdf_longest_side`` when set; then resized and
        augmented by ``data.image_transforms`` (seeded by the item's name: the same at build and batch time)."""
        image = load_image(item, pdf_longest_side=self.data.pdf_longest_side)
        transforms = self.data.image_transforms
        if transforms is None:
            return image
        return transform_image(image, transforms, f"{item.type}:{item.page}:{item.content}")

    def settings(self) -> dict[str, Any]:
        """The text settings, the processor (image sizes, patches, pixel bounds) and how PDF pages render."""
        return {
            **super().settings(),
            "train_on": self.data.train_on,
            "bad_rows": self.data.bad_rows,
            "processor": content_hash([self.processor.to_json_string()]),
            "pdf_longest_side": self.data.pdf_longest_side,
            # a registered format's options, only when set, so the rows of runs without them keep their cache keys
            **{key: value for reader in registered_readers() for key, value in reader.settings(self.data).items()},
            **({"image_transforms": self.data.image_transforms.model_dump()} if self.data.image_transforms else {}),
        }

    def stamps(self, fields: list[dict[str, Any]]) -> list[str]:
        """The local image and PDF files the rows name, with their sizes and modification times."""
        return image_stamps(self.read(fields)[0])

    def read(self, fields: list[dict[str, Any]]) -> tuple[list[Found], BadRowReport]:
        """The sources' examples (read once per set of sources: the cache key reads them for their images)."""
        key = json.dumps(fields, sort_keys=True)
        if self._read is None or self._read[0] != key:
            self._read = (key, read_vision_sources(fields, self.data))  # registered formats through their readers
        return self._read[1]

    def build(self, items: list[Any]) -> list[dict[str, Any] | DataError]:
        """Rows through the processor (many per call), images opened now (a bad image rejects its row here, never
        mid-epoch); each row keeps its rendered text and image references, not pixels, and where its last image
        token is (a cut must not split an image)."""
        loaded: list[Any] = []
        for example in items:
            try:
                if not isinstance(example, Conversation):
                    raise DataError("vl_sft trains on conversations; got a plain-text row")
                messages, image_items = example.to_vl_messages()
                loaded.append(((messages, [self.load_image(item) for item in image_items]), image_items))
            except DataError as error:
                loaded.append(error)
        ready = [entry[0] for entry in loaded if not isinstance(entry, DataError)]
        results = iter(
            tokenize_vl_conversations(
                self.processor, ready, chat_template=self.chat_template, train_on=self.data.train_on
            )
        )
        image_ids, cut = image_token_ids(self.processor), self.cut
        rows: list[dict[str, Any] | DataError] = []
        for entry in loaded:
            item = entry if isinstance(entry, DataError) else next(results)
            rows.append(item if isinstance(item, DataError) else vl_row(item, entry[1], image_ids, cut))
        for reader in registered_readers():
            rows = reader.transform_rows(rows, self.data, self.tokenizer)
        return rows

    def fit(
        self, table: PreparedRows | MemoryRows | JoinedRows, indices: Sequence[int], split: str
    ) -> tuple[list[VLExample], DataReport]:
        """The rows ``indices`` fitted to ``data.seq_len`` (``fit_vl_row``) as VL examples; the rest counted."""
        data = self.data
        report, tokenized = DataReport(), []
        for index in indices:
            row = table.row(index)
            try:
                if row["status"] == REJECTED:
                    raise DataError(row["reason"])
                item, fate = fit_vl_row(row, data.seq_len, data.overlong)
            except DataError as error:
                if data.bad_rows == "fail":
                    raise DataError(f"{row['origin']}: {error}") from None
                report.reject(f"{row['origin']}: {error}")
                continue
            if item is None:
                report.dropped += 1
                continue
            report.truncated += fate == "truncated"
            report.add(len(item.input_ids), sum(label != -100 for label in item.labels[1:]))
            report.add_images(len(item.images), item.image_tokens, item.pixels_before, item.pixels_after)
            tokenized.append(item)
        self.printer(report.summary(split))
        if not tokenized:
            raise DataError(f"no {split} example is left to train on (see the data report above)")
        return tokenized, report

    def dataset(
        self, fitted: list[VLExample], report: DataReport
    ) -> tuple[VLDataset | VLPackedDataset, VLCollator | PackedVLCollator]:
        """Padded rows (length-grouped) by default; packed rows with per-document rope positions when
        ``data.packing: true`` and the family has them (Qwen-VL). Images are re-processed when batched."""
        data, family, pad_id = self.data, self.family, self.tokenizer.pad_token_id
        dataset = VLDataset(fitted, self.processor, self.load_image)
        if self.packs():
            packed = VLPackedDataset(
                fitted, data.seq_len, rows=dataset, rope_positions=self.rope_positions, pad_token_id=pad_id
            )
            report.rows, report.row_length = len(packed), data.seq_len
            report.packing_efficiency = packed.packing_efficiency
            self.printer(
                f"packed into {len(packed):,} rows of {data.seq_len} tokens "
                f"({packed.packing_efficiency:.1%} real tokens)"
            )
            return packed, PackedVLCollator(pad_id, family.model_input_keys)
        report.rows, report.row_length = len(fitted), max(report.lengths)
        image_token_id = self.tokenizer.convert_tokens_to_ids(family.image_token) if family.image_only_batches else None
        return dataset, VLCollator(self.processor, pad_id, family.model_input_keys, image_token_id=image_token_id)
