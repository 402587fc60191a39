"""Where documents come from: files, folders and globs (local or fsspec URLs), as text or JSONL, weighted."""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import sysconfig
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

import fsspec
import numpy as np
from fsspec.implementations.local import LocalFileSystem

from honing.data.text_pieces import split_text
from honing.errors import DataError

log = logging.getLogger(__name__)

STDLIB_PLACEHOLDER = "{stdlib}"
FORMATS = ("auto", "text", "jsonl")
JSONL_SUFFIXES = (".jsonl", ".json")
SOURCE_FIELDS = {"path": None, "format": "auto", "weight": 1.0, "text_field": "text", "max_samples": None}


@dataclass
class Document:
    """One document's text and where it came from (``path`` or ``path:line``)."""

    text: str
    origin: str


def expand_paths(path: str) -> list[str]:
    """The files a path names: one file, every file below a folder, or a glob's matches, sorted."""
    pattern = path.replace(STDLIB_PLACEHOLDER, sysconfig.get_paths()["stdlib"])
    fs, root = fsspec.core.url_to_fs(pattern)
    if any(char in root for char in "*?["):
        matches = fs.glob(root, detail=True)
        files = [name for name, info in matches.items() if info.get("type") == "file"]
    elif fs.isdir(root):
        # Hidden files and folders (.git, .DS_Store) are tooling, not corpus.
        files = [
            name
            for name in fs.find(root)
            if not any(part.startswith(".") for part in os.path.relpath(name, root).split("/"))
        ]
    elif fs.isfile(root):
        files = [root]
    else:
        files = []
    if not files:
        raise DataError(
            f"no files match data path {path!r}"
            + (f" (expanded to {pattern!r})" if pattern != path else "")
            + "; expected a file, a folder holding files, or a glob such as 'data/**/*.jsonl'"
        )
    local = isinstance(fs, LocalFileSystem)
    return sorted(name if local else fs.unstrip_protocol(name) for name in files)


def iter_text_documents(
    path: str, *, format: str = "auto", text_field: str = "text", separator: str | None = None
) -> Iterator[Document]:
    """Every non-empty document under ``path``: whole files (``text``; or their parts between ``separator``s) or
    one field per line (``jsonl``)."""
    if format not in FORMATS:
        raise DataError(f"unknown data format {format!r} for {path!r}; expected one of: {', '.join(FORMATS)}")
    not_utf8: list[str] = []
    try:
        for url in expand_paths(path):
            file_format = format if format != "auto" else ("jsonl" if url.endswith(JSONL_SUFFIXES) else "text")
            if file_format == "jsonl":
                yield from _iter_jsonl(url, text_field)
                continue
            with fsspec.open(url, "rb") as file:
                data = file.read()
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                not_utf8.append(url)
                continue
            for document in split_text(text, separator):
                yield Document(document, url)
    finally:
        if not_utf8:  # once per source, not once per file: a folder may hold many binary files
            log.warning(
                "skipped %d file(s) under %r that are not valid UTF-8 text (first: %s); convert them "
                "to UTF-8 or narrow the path",
                len(not_utf8),
                path,
                not_utf8[0],
            )


def load_documents(
    sources: Sequence[Mapping[str, Any] | object], *, seed: int = 0, separator: str | None = None
) -> list[Document]:
    """The documents of every source, each repeated by its weight (a seeded fraction for the remainder); text
    files split into documents on ``separator`` (None: a file is one document)."""
    documents: list[Document] = []
    for index, source in enumerate(sources):
        fields = source_fields(source, index)
        path, weight, max_samples = fields["path"], fields["weight"], fields["max_samples"]
        found = list(
            islice(
                iter_text_documents(
                    path, format=fields["format"], text_field=fields["text_field"], separator=separator
                ),
                max_samples,
            )
        )
        if not found:
            raise DataError(f"data source {index} ({path!r}) holds no non-empty documents")
        weighted = [found[i] for i in weighted_indices(len(found), weight, seed=seed, source_index=index)]
        if not weighted:
            log.warning(
                "data source %d (%r) contributes no documents: weight %s of %d document(s) rounds to 0",
                index,
                path,
                weight,
                len(found),
            )
        documents.extend(weighted)
    return documents


MAX_WEIGHTED_ITEMS = 10**8  # items one source may give after weighting: far beyond any corpus held in a list


def weighted_indices(count: int, weight: float, *, seed: int, source_index: int) -> list[int]:
    """Indices into a source's ``count`` items repeated by ``weight``: whole copies, then a seeded sorted fraction."""
    whole, fraction = divmod(weight, 1.0)
    if count * whole > MAX_WEIGHTED_ITEMS:  # a typo'd weight (1e9) would otherwise exhaust memory, not fail
        raise DataError(
            f"data source {source_index}: weight {weight:g} over its {count} item(s) gives {count * whole:.3g} "
            f"items; expected a weight giving at most {MAX_WEIGHTED_ITEMS:,}"
        )
    chosen = round(fraction * count)
    # Seeded by (seed, source index) so adding a source later leaves earlier sources' picks unchanged.
    picks = np.sort(np.random.default_rng([seed, source_index]).choice(count, size=chosen, replace=False))
    return list(range(count)) * int(whole) + picks.tolist()


def _iter_jsonl(url: str, text_field: str) -> Iterator[Document]:
    with fsspec.open(url, "rb") as file:
        for line_number, raw in enumerate(file, start=1):
            where = f"{url}:{line_number}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise DataError(f"{where}: not valid UTF-8 ({error.reason} at byte {error.start})") from error
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                hint = (
                    "; format 'auto' reads .json files as JSON Lines, set format: text to read it whole"
                    if url.endswith(".json")
                    else ""
                )
                raise DataError(
                    f"{where}: invalid JSON ({error.msg} at column {error.colno}); "
                    f"expected one JSON object per line{hint}"
                ) from error
            if not isinstance(row, dict):
                raise DataError(f"{where}: expected a JSON object, got {type(row).__name__} {_short(row)}")
            if text_field not in row:
                raise DataError(
                    f"{where}: no field {text_field!r} (fields: {', '.join(map(repr, row)) or 'none'}); "
                    "set the source's text_field to the field holding the text"
                )
            text = row[text_field]
            if not isinstance(text, str):
                raise DataError(
                    f"{where}: field {text_field!r} is {type(text).__name__} {_short(text)}, expected a string"
                )
            if text:
                yield Document(text, where)


def source_fields(source: Mapping[str, Any] | object, index: int) -> dict[str, Any]:
    """A source's fields (from a mapping or an object's attributes) with defaults; path, weight, max_samples checked."""
    if isinstance(source, Mapping):
        unknown = sorted(set(source) - set(SOURCE_FIELDS))
        if unknown:
            raise DataError(
                f"data source {index}: unknown key(s) {', '.join(map(repr, unknown))}; "
                f"expected: {', '.join(SOURCE_FIELDS)}"
            )
        fields = {name: source.get(name, default) for name, default in SOURCE_FIELDS.items()}
    else:
        fields = {name: getattr(source, name, default) for name, default in SOURCE_FIELDS.items()}
    path, weight, max_samples = fields["path"], fields["weight"], fields["max_samples"]
    if not isinstance(path, str) or not path:
        raise DataError(f"data source {index}: path must be a non-empty string, got {path!r}")
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight <= 0:
        raise DataError(f"data source {index} ({path!r}): weight must be a number > 0, got {weight!r}")
    if max_samples is not None and (
        isinstance(max_samples, bool) or not isinstance(max_samples, int) or not 1 <= max_samples <= sys.maxsize
    ):
        raise DataError(
            f"data source {index} ({path!r}): max_samples must be an integer >= 1 or null, got {max_samples!r}"
        )
    fields["weight"] = float(weight)
    return fields


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
