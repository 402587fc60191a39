"""KTO's examples (a prompt, one completion and whether it is desirable) read from the rows KTO users bring.

- ``prompt_completion`` with a ``label``: TRL's unpaired rows (``trl-lib/kto-mix-14k``, which Oumi's TRL_KTO
  configs name): ``prompt`` and ``completion`` as plain strings (the prompt one user message, the completion one
  assistant message) or conversational (lists of messages), ``label`` true (desirable) or false;
- any preference format (``honing.data.preference.pairs``): each pair becomes two examples, the chosen reply
  desirable and the rejected one not, as TRL's ``unpair_preference_dataset`` does.

A row that fits neither, a label that is not a boolean, or an empty completion is a bad row (``data.bad_rows``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from honing.data.formats import RowError
from honing.data.preference.pairs import (
    PREFERENCE_FORMATS,
    Messages,
    _completion,
    _kind,
    _prompt,
    detect_preference_format,
    to_pair,
)
from honing.data.row_reader import BadRowReport, BadRows, RowItems, SourceFormat, SourceKind, named_format, read_items
from honing.errors import DataError

UNPAIRED = "prompt_completion"
KTO_FORMATS = (UNPAIRED, *PREFERENCE_FORMATS)


@dataclass(frozen=True)
class KTOExample:
    """A prompt (messages ending before the reply), one reply to it, and whether that reply is desirable."""

    prompt: Messages
    completion: Messages
    desirable: bool


def detect_kto_format(row: Mapping[str, Any]) -> str:
    """The format a row's keys announce: unpaired (``completion`` + ``label``) or a preference format."""
    if "completion" in row and "label" in row:
        return UNPAIRED
    try:
        return detect_preference_format(row)
    except RowError:
        keys = ", ".join(repr(key) for key in row) or "none"
        raise RowError(
            f"cannot detect a KTO format from the keys {keys}; expected 'prompt', 'completion' and 'label' "
            "(TRL's unpaired rows) or a preference pair ('chosen' and 'rejected' with 'prompt', 'messages' or "
            "'conversations', or alone as transcripts)"
        ) from None


def to_examples(row: Mapping[str, Any], format: str) -> list[KTOExample]:
    """The examples a row holds in ``format``: one for an unpaired row, two for a pair (chosen first)."""
    if format not in KTO_FORMATS:
        raise DataError(f"unknown KTO format {format!r}; expected one of: {', '.join(KTO_FORMATS)}")
    if format != UNPAIRED:
        pair = to_pair(row, format)
        return [KTOExample(pair.prompt, pair.chosen, True), KTOExample(pair.prompt, pair.rejected, False)]
    for key in ("prompt", "completion", "label"):
        if key not in row:
            raise RowError(f"missing key {key!r} (keys: {', '.join(repr(k) for k in row) or 'none'})")
    label = row["label"]
    if not isinstance(label, bool):
        raise RowError(f"'label' must be true (a desirable completion) or false, got {_kind(label)} {label!r}")
    completion = _completion(row["completion"], "completion")
    if not any(message["content"].strip() for message in completion):
        raise RowError("the completion is empty; a KTO row needs a non-empty reply")
    return [KTOExample(_prompt(row["prompt"]), completion, label)]


def _example_items(fields: dict[str, Any], index: int) -> RowItems[KTOExample]:
    """A source's row → its examples, in the source's format (named, or the first row's)."""
    format = SourceFormat(named_format(fields, index, KTO_FORMATS, "KTO rows"), detect_kto_format)
    return lambda record: to_examples(record.row, format.of(record))


#: KTO's examples, read from unpaired rows or from any preference format
KTO_EXAMPLES = SourceKind("KTO rows", ("preference pairs",), _example_items)


def read_example_sources(
    sources: Sequence[Mapping[str, Any] | object], *, bad_rows: BadRows = "fail"
) -> tuple[list[list[tuple[KTOExample, str]]], BadRowReport]:
    """Each source's ``(example, origin)`` in file order (a pair's two examples side by side; at most
    ``max_samples`` rows read), and the bad rows skipped; weights are not applied."""
    return read_items(sources, KTO_EXAMPLES, bad_rows=bad_rows)
