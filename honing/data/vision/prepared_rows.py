"""Vision-language rows as prepared rows keep them, and back: the expanded ids and labels cut at a length with the
row's whole length and where its last image token sits (a later, shorter cut must not split an image), the
rendered text and the image references (never pixels), and the image files' stamps for the cache key."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from honing.data.formats import ContentItem, Conversation
from honing.data.vision.rows import VLExample
from honing.errors import DataError
from honing.losses import IGNORE_INDEX


def vl_row(item: VLExample, images: Sequence[ContentItem], image_ids: set[int], cut: int | None) -> dict[str, Any]:
    """The columns of one built VL example, its ids and labels cut at ``cut`` tokens."""
    ids = item.input_ids
    return {
        "input_ids": ids[:cut],
        "labels": item.labels[:cut],
        "length": len(ids),
        "last_image": max((i for i, token in enumerate(ids) if token in image_ids), default=-1),
        "image_tokens": item.image_tokens,
        "text": item.text,
        "images": [image.model_dump() for image in images],
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


def image_stamps(found: Sequence[Sequence[tuple[Any, str]]]) -> list[str]:
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
