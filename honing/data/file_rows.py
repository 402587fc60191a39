"""Rows of data files: JSON Lines, a JSON array (or JSON Lines named ``.json``) and Parquet, each optionally
compressed (``.gz``, ``.bz2``, ``.xz``; Parquet compresses inside), with each row's origin (``path:line``, 1-based,
or ``path[index]``, 0-based). An unreadable row goes to the caller's ``bad`` handler; an unreadable file raises."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import fsspec

from honing.data.datasets_reader import COMPRESSION_SUFFIXES, Record
from honing.errors import DataError

PARQUET_BATCH_ROWS = 1024

#: called as ``(origin, reason)`` for a row that cannot be read
BadRowHandler = Callable[[str, str], None]
#: a file's records, its bad rows passed to the handler
FileReader = Callable[[str, BadRowHandler], Iterator[Record]]


def file_reader(url: str) -> FileReader | None:
    """The reader of a data file by its name (a compression suffix aside); None for any other file."""
    name = url
    for suffix in COMPRESSION_SUFFIXES:
        name = name.removesuffix(suffix)
    if name.endswith(".jsonl"):
        return iter_jsonl
    if name.endswith(".json"):
        return iter_json
    if name.endswith(".parquet") and name == url:
        return iter_parquet
    return None


def iter_jsonl(url: str, bad: BadRowHandler) -> Iterator[Record]:
    """A JSON Lines file's objects; a line that is not one is a bad row."""
    with fsspec.open(url, "rb", compression="infer") as file:
        for line_number, raw in enumerate(file, start=1):
            origin = f"{url}:{line_number}"
            if not raw.strip():
                continue
            try:
                row = json.loads(raw.rstrip(b"\r\n").decode("utf-8-sig" if line_number == 1 else "utf-8"))
            except UnicodeDecodeError as error:
                bad(origin, f"not valid UTF-8 ({error.reason} at byte {error.start})")
                continue
            except json.JSONDecodeError as error:
                bad(origin, f"invalid JSON: {error.msg} at column {error.colno}; expected one JSON object per line")
                continue
            if not isinstance(row, dict):
                bad(origin, f"expected a JSON object, got {type(row).__name__}")
                continue
            yield Record(row, origin)


def iter_json(url: str, bad: BadRowHandler) -> Iterator[Record]:
    """A JSON array's objects (read whole), or JSON Lines in a ``.json`` file."""
    with fsspec.open(url, "rb", compression="infer") as file:
        head = file.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    if not head.startswith(b"["):  # a .json file holding JSON Lines, as many datasets ship them
        yield from iter_jsonl(url, bad)
        return
    # An array is read whole: a syntax error anywhere makes every row's position unknowable, so it always fails.
    with fsspec.open(url, "rt", encoding="utf-8-sig", compression="infer") as file:
        try:
            rows = json.load(file)
        except json.JSONDecodeError as error:
            raise DataError(
                f"{url}:{error.lineno}: invalid JSON: {error.msg} at column {error.colno}; "
                "a JSON array is read whole, so fix the file (or write it as JSON Lines)"
            ) from error
        except UnicodeDecodeError as error:
            raise DataError(f"{url}: not valid UTF-8 ({error.reason} at byte {error.start})") from error
    for index, row in enumerate(rows):
        if isinstance(row, dict):
            yield Record(row, f"{url}[{index}]")
        else:
            bad(f"{url}[{index}]", f"expected a JSON object, got {type(row).__name__}")


def iter_parquet(url: str, bad: BadRowHandler) -> Iterator[Record]:
    """A Parquet file's rows, streamed in batches of ``PARQUET_BATCH_ROWS``."""
    import pyarrow
    import pyarrow.parquet

    with fsspec.open(url, "rb") as file:
        try:
            batches = pyarrow.parquet.ParquetFile(file).iter_batches(batch_size=PARQUET_BATCH_ROWS)
        except pyarrow.ArrowException as error:
            raise DataError(f"{url}: not a readable Parquet file ({error})") from error
        index = 0
        for batch in batches:
            for row in batch.to_pylist():
                yield Record(row, f"{url}[{index}]")
                index += 1
