"""Oumi's file formats by their names (``text_sft_jsonl``, ``vl_sft_jsonl``, ``preference_pairs_jsonl``, ...): their
rows are honing's formats already, so the builder keeps a row as it is once it holds the columns the name promises
(an Alpaca row in ``text_sft_jsonl`` as well, as Oumi reads it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from honing.data.named.entry import NamedDataset


def same_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row as it is: its format is one of honing's."""
    return dict(row)


FILE_FORMATS = (
    NamedDataset(
        name="text_sft_jsonl",
        aliases=("text_sft",),
        columns=(("messages",), ("instruction", "output")),
        gives="conversations",
        build=same_row,
        description="a JSONL or JSON file of conversations (messages) or Alpaca rows",
    ),
    NamedDataset(
        name="vl_sft_jsonl",
        aliases=("vl_sft", "vision_language_jsonl"),
        columns=(("messages",),),
        gives="image conversations",
        build=same_row,
        description="a JSONL file of conversations whose messages hold image items",
    ),
    NamedDataset(
        name="preference_pairs_jsonl",
        aliases=(),
        columns=(("messages", "chosen", "rejected"), ("prompt", "chosen", "rejected")),
        gives="preference pairs",
        build=same_row,
        description="a JSONL file of a prompt (messages or prompt) with chosen and rejected replies",
    ),
)
