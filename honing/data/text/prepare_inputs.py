"""What ``honing prepare`` reads: sources cut into pieces and shards, the inputs' identity, and each piece's
documents, streamed (line by line, Parquet row groups in batches, ``datasets`` rows) so no corpus is held whole.

A piece is a unit of input a worker can read on its own: a byte range of a text file (cut at a document start or
a seam, ``honing.data.text.pieces``; its documents split on ``data.text_document_separator``, each read in bounded
parts), a byte range of a JSON Lines file (every line whose first byte lies in the range), a run of a Parquet
file's row groups, or every row of a path read through ``honing.data.row_reader.iter_records`` (compressed
files, saved and hub ``datasets``: one stream, one piece). Shards group consecutive pieces of one source up to
``shard_bytes`` of input, so the plan (and the shard files) is a pure function of the inputs and the settings.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import fsspec

from honing import storage
from honing.data.column_mapping import pretraining_text_field
from honing.data.datasets_reader import (
    COMPRESSION_SUFFIXES,
    DATA_SUFFIXES,
    HUB_NAME,
    SAVED_DATASET_MARKERS,
    SPLIT_SUFFIX,
    SUBSET_NEEDS_LOAD_DATASET,
)
from honing.data.row_reader import iter_records
from honing.data.sources import JSONL_SUFFIXES, expand_paths, row_text, source_fields
from honing.data.text import pieces as text_pieces
from honing.data.text.pieces import NotUTF8Error, TextPart, cut_position, iter_text_parts
from honing.errors import ConfigError, DataError

log = logging.getLogger(__name__)

PARQUET_BATCH_ROWS = 1024
READ_FORMATS = ("auto", "text", "jsonl")


@dataclass(frozen=True)
class Piece:
    """A unit of input one worker reads alone; ``size`` is its input bytes (for grouping and progress)."""

    kind: str  # "text" | "jsonl" | "parquet" | "records"
    url: str
    text_field: str
    start: int = 0  # byte offset (text, jsonl) or first row group (parquet)
    stop: int = 0  # end byte offset (jsonl; text, 0: the file's end) or row group after the last (parquet)
    size: int = 0
    separator: str | None = None  # text: what splits documents (None: the whole file is one)
    starts_document: bool = True  # text: False when the range begins inside a document (cut at a seam)
    ends_document: bool = True  # text: False when the range ends inside one
    subset: str | None = None  # records read through datasets.load_dataset: the dataset's configuration


@dataclass
class Plan:
    """Shards (each a list of pieces of one source), the source of each shard, and what identifies the inputs."""

    shards: list[list[Piece]]
    shard_sources: list[int]
    identity: list[str]


def plan_sources(sources: Sequence[Any], shard_bytes: int, *, separator: str | None = None) -> Plan:
    """Cut every source into pieces and group them into shards of about ``shard_bytes`` of input; text files'
    documents split on ``separator``."""
    shards: list[list[Piece]] = []
    shard_sources: list[int] = []
    identity: list[str] = []
    for index, source in enumerate(sources):
        fields = source_fields(source, index)
        path, format, text_field = fields["path"], fields["format"], pretraining_text_field(fields, index)
        if format not in READ_FORMATS:
            raise ConfigError(
                f"data.train.sources[{index}].format: {format!r} cannot be prepared; expected one of: "
                f"{', '.join(READ_FORMATS)} (a prepared folder is read with format: tokens, not prepared again)"
            )
        if fields["max_samples"] is not None:
            raise ConfigError(
                f"data.train.sources[{index}].max_samples: prepare writes every document of a source; remove "
                "max_samples (mix prepared folders with weight instead)"
            )
        if fields["weight"] != 1.0:
            log.info(
                "source %d (%r): prepare writes every document once; weight %s applies when training, "
                "set it on the format: tokens source",
                index,
                path,
                fields["weight"],
            )
        settings = {"path": path, "format": format, "text_field": text_field}
        if fields["subset"] is not None:  # only then: inputs prepared before subsets keep their identity
            settings["subset"] = fields["subset"]
        identity.append(json.dumps(settings if separator is None else {**settings, "separator": separator}))
        pieces: list[Piece] = []
        for url, size, checksum in source_files(path):
            identity.append(f"{url}\t{size}\t{checksum}")
            pieces.extend(_pieces(url, size, format, text_field, shard_bytes, separator, fields["subset"]))
        for group in _group(pieces, shard_bytes):
            shards.append(group)
            shard_sources.append(index)
    return Plan(shards, shard_sources, identity)


def sample_texts(sources: Sequence[Any], max_bytes: int, *, separator: str | None = None) -> list[str]:
    """The sources' first documents (a long one in parts), in order, up to about ``max_bytes`` of text: what a bpe
    or char tokenizer is trained on when a corpus too large for memory is prepared."""
    texts: list[str] = []
    size = 0
    for shard in plan_sources(sources, max_bytes, separator=separator).shards:
        for piece in shard:
            try:
                for part in iter_piece_texts(piece):
                    texts.append(part.text)
                    size += len(part.text)
                    if size >= max_bytes:
                        return texts
            except NotUTF8Error as error:
                log.warning("skipped the rest of %s", error)
    return texts


def iter_piece_texts(piece: Piece) -> Iterator[TextPart]:
    """Every non-empty document of ``piece``, a long text document in several parts, each with the input bytes
    read for it (0 where the bytes of one row are unknown: the caller counts the rest of ``piece.size`` when the
    piece ends). A text piece that is not UTF-8 raises ``NotUTF8Error`` after the parts before the bad byte."""
    if piece.kind == "text":
        with fsspec.open(piece.url, "rb") as file:
            file.seek(piece.start)
            yield from iter_text_parts(
                file,
                separator=piece.separator,
                limit=piece.stop - piece.start if piece.stop else None,
                starts_document=piece.starts_document,
                ends_document=piece.ends_document,
                piece_bytes=text_pieces.PIECE_BYTES,  # read now: a test sets it tiny
                where=piece.url,
                offset=piece.start,
            )
    elif piece.kind == "jsonl":
        yield from _iter_jsonl_range(piece)
    elif piece.kind == "parquet":
        yield from _iter_parquet_groups(piece)
    else:
        for record in iter_records(piece.url, subset=piece.subset):
            text = row_text(record.row, piece.text_field, record.origin)
            if text:
                yield TextPart(text, 0)


def source_files(path: str) -> list[tuple[str, int, str]]:
    """``(url, size, change marker)`` of each file a path names. A path read through ``datasets`` is one stream
    with size 0, identified by its name and, for a local folder, its files' sizes and times."""
    if _is_stream(path):
        folder = SPLIT_SUFFIX.match(path)["base"] if SPLIT_SUFFIX.match(path) else path
        found = []
        for parent, _, names in os.walk(folder):  # nothing for a hub name
            for name in names:
                file = os.path.join(parent, name)
                found.append((os.path.relpath(file, folder), os.path.getsize(file), os.path.getmtime(file)))
        return [(path, 0, json.dumps(sorted(found)))]
    files = []
    for url in expand_paths(path):
        fs, root = fsspec.core.url_to_fs(url)
        info = fs.info(root)
        if storage.is_url(url):
            # An object store's own content hash (S3's ETag: the MD5 of the object or of its parts): reading
            # terabytes back to hash them again would cost a full download.
            keys = ("ETag", "etag", "md5", "LastModified")
            marker = next((str(info[key]) for key in keys if key in info), "")
        else:
            marker = file_digest(root)  # ~0.45 GB/s: ~1.5 % of tokenizing it; a touched file stays the same
        files.append((url, int(info.get("size") or 0), marker))
    return files


def file_digest(path: str) -> str:
    """The BLAKE2b digest of a local file's bytes, read in 8 MiB blocks."""
    digest = hashlib.blake2b(digest_size=20)
    with open(path, "rb") as handle:
        while block := handle.read(8 * 2**20):
            digest.update(block)
    return digest.hexdigest()


def _is_stream(path: str) -> bool:
    """True when ``path`` is read through ``datasets``: a saved dataset folder, ``folder:split``, a hub name."""
    if "://" in path:
        return False
    if os.path.isdir(path):
        return any(os.path.isfile(os.path.join(path, marker)) for marker in SAVED_DATASET_MARKERS)
    if os.path.exists(path):
        return False
    match = SPLIT_SUFFIX.match(path)
    base = match["base"] if match else path
    return os.path.isdir(base) or bool(HUB_NAME.match(base) and not base.endswith(DATA_SUFFIXES))


def _pieces(
    url: str, size: int, format: str, text_field: str, shard_bytes: int, separator: str | None, subset: str | None
) -> list[Piece]:
    if _is_stream(url):
        return [Piece("records", url, text_field, subset=subset)]
    if subset is not None:
        raise DataError(f"{url!r}: {SUBSET_NEEDS_LOAD_DATASET} ({subset!r}); this path names files")
    name = url
    compressed = name.endswith(COMPRESSION_SUFFIXES)
    for suffix in COMPRESSION_SUFFIXES:
        name = name.removesuffix(suffix)
    kind = format if format != "auto" else ("jsonl" if name.endswith(JSONL_SUFFIXES) else "text")
    if format == "auto" and name.endswith(".parquet") and not compressed:
        return _parquet_pieces(url, text_field, shard_bytes)
    if compressed and kind == "jsonl":
        return [Piece("records", url, text_field, size=size)]  # no seeking inside a compressed stream
    if kind == "text":
        if compressed or size <= shard_bytes:
            return [Piece("text", url, text_field, size=size, separator=separator)]  # stop 0: to the end
        return _text_pieces(url, size, text_field, shard_bytes, separator)
    return [
        Piece("jsonl", url, text_field, start, min(start + shard_bytes, size), min(shard_bytes, size - start))
        for start in range(0, max(size, 1), shard_bytes)
    ]


def _text_pieces(url: str, size: int, text_field: str, shard_bytes: int, separator: str | None) -> list[Piece]:
    """Byte ranges of a text file, each starting at the first document start or seam from a multiple of
    ``shard_bytes`` on (read from the bytes around it), so workers read one large file in parallel."""
    cuts = [(0, True)]
    with fsspec.open(url, "rb") as file:
        for nominal in range(shard_bytes, size, shard_bytes):
            position, starts_document = cut_position(file, nominal, size, separator)
            if position > cuts[-1][0]:
                cuts.append((position, starts_document))
    if cuts[-1][0] < size:
        cuts.append((size, True))
    return [
        Piece("text", url, text_field, start, stop, stop - start, separator, starts, ends)
        for (start, starts), (stop, ends) in zip(cuts, cuts[1:])
    ]


def _parquet_pieces(url: str, text_field: str, shard_bytes: int) -> list[Piece]:
    import pyarrow
    import pyarrow.parquet

    with fsspec.open(url, "rb") as file:
        try:
            metadata = pyarrow.parquet.ParquetFile(file).metadata
        except pyarrow.ArrowException as error:
            raise DataError(f"{url}: not a readable Parquet file ({error})") from error
    pieces, first, size = [], 0, 0
    for group in range(metadata.num_row_groups):
        size += metadata.row_group(group).total_byte_size
        if size >= shard_bytes or group == metadata.num_row_groups - 1:
            pieces.append(Piece("parquet", url, text_field, first, group + 1, size))
            first, size = group + 1, 0
    return pieces


def _group(pieces: list[Piece], shard_bytes: int) -> Iterator[list[Piece]]:
    group: list[Piece] = []
    size = 0
    for piece in pieces:
        if group and (size + piece.size > shard_bytes or piece.kind == "records"):
            yield group
            group, size = [], 0
        group.append(piece)
        size += piece.size
    if group:
        yield group


def _iter_jsonl_range(piece: Piece) -> Iterator[tuple[str, int]]:
    with fsspec.open(piece.url, "rb") as file:
        file.seek(max(piece.start - 1, 0))
        if piece.start > 0:
            file.readline()  # the rest of the line holding byte start-1 belongs to the previous piece
        position = file.tell()
        while position < piece.stop:
            raw = file.readline()
            if not raw:
                break
            where, consumed = f"{piece.url} (line at byte {position})", len(raw)
            position += consumed
            if not raw.strip():
                continue
            try:
                row = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as error:
                raise DataError(f"{where}: not valid UTF-8 ({error.reason} at byte {error.start})") from error
            except json.JSONDecodeError as error:
                raise DataError(
                    f"{where}: invalid JSON ({error.msg} at column {error.colno}); expected one JSON object per line"
                ) from error
            text = row_text(row, piece.text_field, where)
            if text:
                yield TextPart(text, consumed)


def _iter_parquet_groups(piece: Piece) -> Iterator[tuple[str, int]]:
    import pyarrow.parquet

    with fsspec.open(piece.url, "rb") as file:
        parquet = pyarrow.parquet.ParquetFile(file)
        names = parquet.schema_arrow.names
        if piece.text_field not in names:
            raise DataError(
                f"{piece.url}: no column {piece.text_field!r} (columns: {', '.join(map(repr, names))}); "
                "set the source's text_field to the column holding the text"
            )
        groups = list(range(piece.start, piece.stop))
        for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS, row_groups=groups, columns=[piece.text_field]):
            for text in batch.column(0).to_pylist():
                if text is not None and not isinstance(text, str):
                    raise DataError(
                        f"{piece.url}: column {piece.text_field!r} holds {type(text).__name__}, expected strings"
                    )
                if text:
                    yield TextPart(text, 0)  # compressed columns: progress is counted per piece
