"""Plain text files read in bounded pieces: documents split on a separator, a long document cut at seams.

A text file is one document, or, with ``data.text_document_separator``, the non-empty parts of
``text.split(separator)`` (``split_text``: the in-memory rule that training from raw text applies). The streaming
reader (``iter_text_parts``) gives the same documents while holding at most ``piece_bytes`` of one of them (plus one
read block): a longer document comes out as several parts, flagged so the caller appends one eos after its last.

Seams, where a long document is cut: after a newline between two printable ASCII characters, else before a space
that follows one, else at a character boundary. Ids across a seam are what tokenizing the whole would give:

- byte tokenizer: always (ids are the UTF-8 bytes);
- byte-level BPE with a GPT-2 or Llama-3 style pre-tokenizer regex (honing's own ``bpe``, GPT-2, Llama 3, Qwen):
  at the first two kinds of seam, where a pre-token ends whether the text goes on or not, so no merge crosses
  them (checked on the standard library's source in ``tests/data/test_text_pieces.py``); a character-boundary
  seam, taken only when a whole piece holds neither kind (64 KiB of text without one), may split a pre-token;
- SentencePiece-style tokenizers that prefix each input with "▁" (Metaspace, ``prepend_scheme="always"``): a
  seam may add that one prefix token.

A byte range of a file (``cut_position``: ``honing prepare`` gives each worker one) starts at a document start or
at a seam no separator occurrence straddles, found from the bytes around the nominal cut alone; each range is read
on its own and the ranges together give the whole file's documents. The separator is matched leftmost first
without overlaps, as ``str.split`` does; a self-overlapping separator (``"\\n\\n"`` in a long run of newlines) has
a phase, recovered by walking back over the run, up to ``CUT_WINDOW_BYTES``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from honing.errors import DataError

READ_BYTES = 1 << 20  # bytes read from the file at a time
PIECE_BYTES = 1 << 16  # the most text one part holds: a longer document is cut at a seam (tests set it tiny)
CUT_WINDOW_BYTES = 1 << 20  # how far a range cut looks for a document start or a seam
_PRINTABLE = range(0x21, 0x7F)  # printable ASCII, no space


@dataclass(frozen=True)
class TextPart:
    """Text of one document, or a piece of one: eos follows only the part that ends its document."""

    text: str
    consumed: int  # input bytes read since the previous part (progress)
    starts_document: bool = True
    ends_document: bool = True


class NotUTF8Error(DataError):
    """A text file (or a byte range of one) that is not valid UTF-8."""


def split_text(text: str, separator: str | None) -> list[str]:
    """The non-empty documents of a whole text: the text itself, or the parts between separators."""
    if separator is None:
        return [text] if text else []
    _check_separator(separator)
    return [document for document in text.split(separator) if document]


def iter_text_parts(
    file: BinaryIO,
    *,
    separator: str | None,
    limit: int | None = None,
    starts_document: bool = True,
    ends_document: bool = True,
    piece_bytes: int | None = PIECE_BYTES,
    where: str = "text",
    offset: int = 0,
) -> Iterator[TextPart]:
    """The documents of ``file`` from where it stands, up to ``limit`` bytes, as parts of at most ``piece_bytes``
    (None: whole documents). ``starts_document`` / ``ends_document`` say whether the range begins and ends on a
    document boundary (a range cut at a seam does not). ``NotUTF8Error`` names ``where`` and the byte (counted
    from ``offset``) on invalid UTF-8; the parts before it were already given."""
    if separator is not None:
        _check_separator(separator)
    if piece_bytes is not None and piece_bytes < 4:  # a UTF-8 character takes up to 4 bytes
        raise DataError(f"text piece size must be >= 4 bytes, got {piece_bytes}")
    sep = separator.encode("utf-8") if separator is not None else b""
    keep = max(len(sep) - 1, 0)  # a separator may straddle the next read: no cut among the last keep bytes
    remaining = limit
    data, position, scanned = b"", 0, 0  # no separator starts in data[position:scanned]
    consumed = reported = offset  # file offsets of data[position] and of the end of the last part given
    starting, has_text = starts_document, not starts_document

    def emit(stop: int, end: bool, skip: int = 0) -> Iterator[TextPart]:
        """Give data[position:stop] as a part (an empty one only to end a document that has text), then step
        over ``skip`` separator bytes."""
        nonlocal position, consumed, reported, starting, has_text
        raw = data[position:stop]
        if raw or (end and has_text):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise NotUTF8Error(f"{where}: not valid UTF-8 text (byte {consumed + error.start})") from error
            done = consumed + len(raw) + skip
            yield TextPart(text, done - reported, starting, end)
            reported, starting, has_text = done, False, True
        consumed += len(raw) + skip
        position = stop + skip
        if end:
            starting, has_text = True, False

    while True:
        size = READ_BYTES if remaining is None else min(READ_BYTES, remaining)
        block = file.read(size) if size > 0 else b""
        if remaining is not None:
            remaining -= len(block)
        data = data[position:] + block
        scanned, position = max(scanned - position, 0), 0
        tail = keep if block else 0  # at the end nothing more can complete a separator
        while True:
            found = data.find(sep, scanned) if sep else -1
            scanned = found if found >= 0 else max(position, len(data) - keep)
            end = found if found >= 0 else len(data) - tail
            if piece_bytes is not None and end - position > piece_bytes:
                # no separator starts in data[position:end], so none straddles a seam before end
                yield from emit(seam_before(data, position, position + piece_bytes), False)
                scanned = max(scanned, position)
            elif found >= 0:
                yield from emit(found, True, skip=len(sep))
                scanned = position
            else:
                break
        if not block:
            break
    yield from emit(len(data), ends_document)


def _check_separator(separator: str) -> None:
    if not separator:
        raise DataError("data.text_document_separator: empty; expected a string such as '\\n\\n' (a blank line)")


def seam_before(data: bytes, low: int, high: int) -> int:
    """The last seam ``p`` in ``(low, high]`` (the next piece starts at ``p``): after a newline between printable
    characters, else before a space that follows one, else the last character boundary."""
    before = high
    while (newline := data.rfind(b"\n", low + 1, before)) >= 0:
        if _lone_newline(data, newline):
            return newline + 1
        before = newline
    before = high + 1
    while (space := data.rfind(b" ", low + 1, before)) > low:
        if data[space - 1] in _PRINTABLE:
            return space
        before = space
    return _char_boundary(data, low, high)


def cut_position(file: BinaryIO, nominal: int, size: int, separator: str | None) -> tuple[int, bool]:
    """Where a byte range nominally starting at ``nominal`` really starts: ``(position, a document starts there)``.

    The first document start at or after ``nominal`` within ``CUT_WINDOW_BYTES``, else the first seam there that no
    separator occurrence straddles (the document goes on across it)."""
    if nominal <= 0:
        return 0, True
    if nominal >= size:
        return size, True
    sep = separator.encode("utf-8") if separator else b""
    low = max(0, nominal - len(sep) - CUT_WINDOW_BYTES)
    high = min(size, nominal + CUT_WINDOW_BYTES)
    file.seek(low)
    data = file.read(min(size, high + len(sep)) - low)  # beyond high: whether a separator straddles a seam
    at, stop = nominal - low, high - low
    if sep:
        start = _unstraddled_before(data, max(at - len(sep), 0), sep)
        while (found := data.find(sep, start, stop + len(sep))) >= 0:
            if found + len(sep) >= at:
                return low + found + len(sep), True
            start = found + len(sep)
    for seam in _seams_after(data, at, stop):
        if not sep or data.find(sep, max(seam - len(sep) + 1, 0), seam + len(sep) - 1) < 0:
            return low + seam, False
    if high == size:
        return size, True  # the rest of the file stays with the range before
    return nominal, False  # no character boundary near: not UTF-8 text, which the reader refuses anyway


def _unstraddled_before(data: bytes, position: int, sep: bytes) -> int:
    """A position at or before ``position`` that no occurrence of ``sep`` straddles: scanning for separators from
    there finds the same ones as scanning from the file's start (0 when the walk leaves ``data``)."""
    while position > 0:
        straddling = data.rfind(sep, max(position - len(sep) + 1, 0), position + len(sep) - 1)
        if straddling < 0 or straddling >= position:
            return position
        position = straddling
    return 0


def _seams_after(data: bytes, position: int, stop: int) -> Iterator[int]:
    """Seams in ``[position, stop)`` in order of preference: each kind from nearest to farthest."""
    start = max(position - 1, 1)
    while (newline := data.find(b"\n", start, stop - 1)) >= 0:
        if _lone_newline(data, newline):
            yield newline + 1
        start = newline + 1
    start = max(position, 1)
    while (space := data.find(b" ", start, stop)) >= 0:
        if data[space - 1] in _PRINTABLE:
            yield space
        start = space + 1
    for seam in range(position, min(stop, len(data))):
        if data[seam] & 0xC0 != 0x80:
            yield seam


def _lone_newline(data: bytes, newline: int) -> bool:
    """A newline between two printable characters: a pre-token of its own whether the text goes on after it or
    ends there (after a longer run of whitespace the last one splits off only when text follows)."""
    return 0 < newline < len(data) - 1 and data[newline - 1] in _PRINTABLE and data[newline + 1] in _PRINTABLE


def _char_boundary(data: bytes, low: int, high: int) -> int:
    """The last position in ``(low, high]`` not inside a UTF-8 character (``high`` when there is none)."""
    position = high
    while position > low + 1 and position < len(data) and data[position] & 0xC0 == 0x80:
        position -= 1
    return position if position > low else high
