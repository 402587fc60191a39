"""Where documents come from: files, folders and globs (local or fsspec URLs), as text or JSONL, weighted."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

import fsspec

from honing.data.column_mapping import pretraining_text_field
from honing.data.datasets_reader import SUBSET_NEEDS_LOAD_DATASET, reads_with_datasets
from honing.data.mixture import mixed_picks
from honing.data.row_reader import iter_records
from honing.data.sources import JSONL_SUFFIXES, expand_paths, row_text, source_fields, weighted_indices
from honing.data.subset import seeded_subset
from honing.data.text.pieces import split_text
from honing.errors import DataError

log = logging.getLogger(__name__)

FORMATS = ("auto", "text", "jsonl")


@dataclass
class Document:
    """One document's text and where it came from (``path`` or ``path:line``)."""

    text: str
    origin: str


def iter_text_documents(
    path: str,
    *,
    format: str = "auto",
    text_field: str = "text",
    separator: str | None = None,
    subset: str | None = None,
) -> Iterator[Document]:
    """Every non-empty document under ``path``: whole files (``text``; or their parts between ``separator``s), one
    field per line (``jsonl``), or that field of each row of a dataset read through ``datasets`` (saved, a hub
    name or ``folder:split``, of ``subset`` where given)."""
    if format not in FORMATS:
        raise DataError(f"unknown data format {format!r} for {path!r}; expected one of: {', '.join(FORMATS)}")
    if reads_with_datasets(path):
        for record in iter_records(path, subset=subset):
            text = row_text(record.row, text_field, record.origin)
            if text:
                yield Document(text, record.origin)
        return
    if subset is not None:
        raise DataError(f"{path!r}: {SUBSET_NEEDS_LOAD_DATASET} ({subset!r}); this path names files")
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
    sources: Sequence[Mapping[str, Any] | object],
    *,
    seed: int = 0,
    separator: str | None = None,
    mixture: Any = None,
    where: str = "data.train",
) -> list[Document]:
    """The documents of every source, each repeated by its weight (a seeded fraction for the remainder), or drawn
    by the split's ``mixture`` section (``honing.data.mixture``; ``where`` names the split); text files split into
    documents on ``separator`` (None: a file is one document)."""
    if mixture is not None:
        found = [_source_documents(source, index, separator) for index, source in enumerate(sources)]
        picks = mixed_picks([len(docs) for docs in found], sources, mixture, seed=seed, where=where)
        flat = [doc for docs in found for doc in docs]
        return [flat[i] for i in picks]
    documents: list[Document] = []
    for index, source in enumerate(sources):
        found = _source_documents(source, index, separator)
        fields = source_fields(source, index)
        path, weight = fields["path"], fields["weight"]
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


def _source_documents(source: Mapping[str, Any] | object, index: int, separator: str | None) -> list[Document]:
    """A source's documents once, in file order (at most ``max_samples``: the first, or a subset by ``sample_seed``)."""
    fields = source_fields(source, index)
    documents = iter_text_documents(
        fields["path"],
        format=fields["format"],
        text_field=pretraining_text_field(fields, index),
        separator=separator,
        subset=fields["subset"],
    )
    limit, seed = fields["max_samples"], fields["sample_seed"]
    found = list(islice(documents, limit)) if seed is None or limit is None else seeded_subset(documents, limit, seed)
    if not found:
        raise DataError(f"data source {index} ({fields['path']!r}) holds no non-empty documents")
    return found


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
            text = row_text(row, text_field, where)
            if text:
                yield Document(text, where)
