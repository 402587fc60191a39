"""Rows of fine-tuning sources (JSONL, JSON, Parquet, saved or hub ``datasets``) and the examples they hold, weighted.

A source path is read as, in order:

- a folder written by ``datasets.Dataset.save_to_disk`` (or ``DatasetDict.save_to_disk``, as ``folder:split``);
- ``folder:split`` for any other local folder: ``datasets.load_dataset(folder, split=split, streaming=True)``;
- a file, folder, glob or fsspec URL (``honing.data.sources.expand_paths``): ``.jsonl``, ``.json`` (an array or
  JSON Lines), ``.parquet``, each optionally compressed (``.gz``, ``.bz2``, ``.xz``);
- when nothing exists at the path and it looks like ``owner/name`` or ``owner/name:split``: that Hugging Face
  Hub dataset, streamed (split ``train`` by default; a sliced split, ``train[90%:]``, is read whole to slice it).
"""

from __future__ import annotations

import json
import logging
import lzma
import os
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import fsspec
import numpy as np

from honing.data.column_mapping import mapped_row
from honing.data.datasets_reader import (  # noqa: F401  (re-exported: sources name them from here)
    COMPRESSION_SUFFIXES,
    DATA_SUFFIXES,
    HUB_NAME,
    SAVED_DATASET_MARKERS,
    SPLIT_SUFFIX,
    SUBSET_NEEDS_LOAD_DATASET,
    Record,
    datasets_target,
    reads_with_datasets,
)
from honing.data.formats import (
    EXAMPLE_FORMATS,
    Conversation,
    Example,
    RowError,
    detect_format,
    resolve_image_paths,
    to_example,
)
from honing.data.named.entry import Gives, NamedDataset
from honing.data.named.registry import check_gives, named_dataset, named_row
from honing.data.report import BadRowReport
from honing.data.sources import expand_paths, source_fields, weighted_indices
from honing.errors import DataError

log = logging.getLogger(__name__)

SOURCE_FORMATS = ("auto",) + EXAMPLE_FORMATS
PARQUET_BATCH_ROWS = 1024

BadRowHandler = Callable[[str, str], None]
ImageCheck = Callable[[Conversation], list[str]]  # the reasons a row's images cannot be read


@dataclass
class ExampleSet:
    """The examples of every source after weighting, each example's origin, and the bad rows skipped."""

    examples: list[Example]
    origins: list[str]
    report: BadRowReport


def iter_records(
    path: str, *, on_bad_row: BadRowHandler | None = None, subset: str | None = None, dataset: str | None = None
) -> Iterator[Record]:
    """Every row under ``path``; an unreadable row raises ``DataError`` or, given ``on_bad_row``, is passed to it
    as ``(origin, reason)`` and skipped. ``subset`` names a configuration of a dataset read with
    ``datasets.load_dataset`` (a hub name or ``folder:split``), as ``load_dataset(path, subset)`` does; ``dataset``
    a named data set (``honing.data.named``), whose builder turns each row of its own columns into honing's."""
    if dataset is not None:
        yield from _named_records(path, named_dataset(dataset), on_bad_row, subset)
        return
    target = datasets_target(path, subset)
    if target is not None:
        yield from target()
        return
    if subset is not None:
        raise DataError(f"{path!r}: {SUBSET_NEEDS_LOAD_DATASET} ({subset!r}); this path names files")
    files = expand_paths(path)
    unsupported = []
    for url in files:
        reader = _reader(url)
        if reader is None:
            if len(files) == 1:
                raise DataError(
                    f"{url}: unsupported file type; expected .jsonl, .json or .parquet (optionally "
                    f"{', '.join(COMPRESSION_SUFFIXES)}), a saved datasets folder or a hub name"
                )
            unsupported.append(url)
            continue
        folder = _folder(url)
        try:
            for record in reader(url, lambda origin, reason: _bad_row(on_bad_row, origin, reason)):
                record.folder = folder
                yield record
        except (OSError, EOFError, zlib.error, lzma.LZMAError) as error:  # e.g. a .gz that is not gzip, truncated
            raise DataError(f"{url}: cannot read the file: {type(error).__name__}: {error}") from error
    if unsupported:  # once per path: a folder may hold a README and other files beside its data
        log.warning(
            "skipped %d file(s) under %r that are not .jsonl, .json or .parquet (first: %s)",
            len(unsupported),
            path,
            unsupported[0],
        )


def source_records(
    fields: Mapping[str, Any], index: int, reads: tuple[Gives, ...], *, on_bad_row: BadRowHandler | None = None
) -> Iterator[Record]:
    """The records of a source's fields (``source_fields``); a named data set whose rows are not what the method
    ``reads`` is refused now, before any row is read."""
    if fields["dataset"] is not None:
        check_gives(named_dataset(fields["dataset"]), reads, f"data source {index} ({fields['path']!r})")
    records = iter_records(fields["path"], on_bad_row=on_bad_row, subset=fields["subset"], dataset=fields["dataset"])
    columns, roles = fields.get("columns") or {}, fields.get("roles") or {}
    if not columns and not roles:
        return records
    return (Record(mapped_row(record.row, columns, roles), record.origin, record.folder) for record in records)


def _named_records(
    path: str, entry: NamedDataset, on_bad_row: BadRowHandler | None, subset: str | None
) -> Iterator[Record]:
    """The records of ``path`` with each row built by the named data set (a row it cannot build is a bad row)."""
    for record in iter_records(path, on_bad_row=on_bad_row, subset=subset):
        try:
            yield Record(named_row(entry, record.row), record.origin, record.folder)
        except RowError as error:
            _bad_row(on_bad_row, record.origin, error.reason)


def read_sources(
    sources: Sequence[Mapping[str, Any] | object],
    *,
    bad_rows: Literal["fail", "skip"] = "fail",
    check_images: ImageCheck | None = None,
) -> tuple[list[list[tuple[Example, str]]], BadRowReport]:
    """Each source's ``(example, origin)`` pairs once, in file order (at most ``max_samples``, the first valid
    ones), and the bad rows skipped; weights are not applied (``load_examples`` and prepared rows apply them)."""
    _check_policy(bad_rows)
    report = BadRowReport()
    found = [
        list(
            _source_examples(_fields(source, index), index, bad_rows=bad_rows, report=report, check_images=check_images)
        )
        for index, source in enumerate(sources)
    ]
    return found, report


def weighted_picks(counts: Sequence[int], weights: Sequence[float], paths: Sequence[str], *, seed: int) -> list[int]:
    """Indices into the concatenation of sources of ``counts`` items, each source repeated by its weight as
    ``load_examples`` repeats it (a warning for a source whose weight leaves nothing)."""
    out: list[int] = []
    start = 0
    for index, (count, weight, path) in enumerate(zip(counts, weights, paths)):
        picks = weighted_indices(count, weight, seed=seed, source_index=index)
        if not picks:
            log.warning(
                "data source %d (%r) contributes no examples: weight %s of %d example(s) rounds to 0",
                index,
                path,
                weight,
                count,
            )
        out.extend(start + i for i in picks)
        start += count
    return out


def load_examples(
    sources: Sequence[Mapping[str, Any] | object],
    *,
    seed: int = 0,
    bad_rows: Literal["fail", "skip"] = "fail",
    check_images: ImageCheck | None = None,
) -> ExampleSet:
    """The examples of every source in order, each repeated by its weight like ``load_documents``.

    A source gives at most ``max_samples`` examples: the first valid ones in file order. Weight ``w`` then keeps
    ``int(w)`` copies of them plus a seeded sample of ``round((w % 1) * n)``. Relative image and pdf paths are
    joined to their data file's folder; with ``check_images`` (``honing.data.vision.images.check_images``) a row
    whose images do not all open is a bad row.
    """
    found, report = read_sources(sources, bad_rows=bad_rows, check_images=check_images)
    fields = [_fields(source, index) for index, source in enumerate(sources)]
    flat = [item for items in found for item in items]
    picks = weighted_picks(
        [len(items) for items in found], [f["weight"] for f in fields], [f["path"] for f in fields], seed=seed
    )
    warn_skipped(report)
    return ExampleSet([flat[i][0] for i in picks], [flat[i][1] for i in picks], report)


def iter_examples(
    sources: Sequence[Mapping[str, Any] | object],
    *,
    seed: int = 0,
    bad_rows: Literal["fail", "skip"] = "fail",
    report: BadRowReport | None = None,
    check_images: ImageCheck | None = None,
) -> Iterator[tuple[Example, str]]:
    """Every example of every source once, streamed, as ``(example, origin)``.

    Sources are interleaved by a seeded draw in proportion to their weights until all are exhausted, so weights
    set the mix along the stream, not how often examples repeat. Bad rows skipped are counted in ``report``;
    images as in ``load_examples``.
    """
    _check_policy(bad_rows)
    report = report if report is not None else BadRowReport()
    fields = [_fields(source, index) for index, source in enumerate(sources)]
    streams = [
        _source_examples(f, index, bad_rows=bad_rows, report=report, check_images=check_images)
        for index, f in enumerate(fields)
    ]
    rng = np.random.default_rng(seed)
    active = list(range(len(streams)))
    while active:
        weights = np.array([fields[i]["weight"] for i in active])
        chosen = active[rng.choice(len(active), p=weights / weights.sum())]
        item = next(streams[chosen], None)
        if item is None:
            active.remove(chosen)
            continue
        yield item
    warn_skipped(report)


def _source_examples(
    fields: dict[str, Any], index: int, *, bad_rows: str, report: BadRowReport, check_images: ImageCheck | None = None
) -> Iterator[tuple[Example, str]]:
    path, text_field, max_samples = fields["path"], fields["text_field"], fields["max_samples"]

    def bad(origin: str, reason: str) -> None:
        if bad_rows == "fail":
            raise DataError(f"{origin}: {reason}; set data.bad_rows: skip to skip such rows")
        report.add(path, origin, reason)

    format = None if fields["format"] == "auto" else fields["format"]
    detected_at = None
    count = 0
    for record in source_records(fields, index, ("conversations", "image conversations"), on_bad_row=bad):
        try:
            if format is None:
                format, detected_at = detect_format(record.row, text_field=text_field), record.origin
            example = to_example(record.row, format, text_field=text_field)
        except RowError as error:
            bad(record.origin, _mismatch(record.row, format, detected_at, text_field) or error.reason)
            continue
        if isinstance(example, Conversation) and example.images():
            if record.folder is not None:
                example = resolve_image_paths(example, record.folder)
            problems = check_images(example) if check_images else []
            if problems:  # found now, while the data set is built, not by a loader worker mid-epoch
                bad(record.origin, "; ".join(problems))
                continue
        yield example, record.origin
        count += 1
        if count == max_samples:  # stop reading: max_samples exists to sample a head of a large source
            return
    if not count:
        skipped = report.per_source.get(path, 0)
        raise DataError(
            f"data source {index} ({path!r}) holds no examples"
            + (f" ({skipped} bad row(s) skipped: {report.summary()})" if skipped else "")
        )


def _mismatch(row: Any, format: str | None, detected_at: str | None, text_field: str) -> str | None:
    """Why an auto-detected source rejects a row that is in another format, if it is."""
    if detected_at is None:
        return None
    try:
        other = detect_format(row, text_field=text_field)
    except RowError:
        return None
    if other == format:
        return None
    # LLaMA-Factory files mix rows with and without images; format mllm reads both.
    if other == "mllm":
        fix = "set the source's format: mllm, which reads rows without images too"
    else:
        fix = "a source holds one format, so split the files into two sources"
    return f"row is in format {other!r} but the source's format is {format!r} (detected from {detected_at}); {fix}"


def _fields(source: Mapping[str, Any] | object, index: int) -> dict[str, Any]:
    fields = source_fields(source, index)
    if fields["format"] not in SOURCE_FORMATS:
        hint = " ('jsonl' reads text for pretraining; here use 'text')" if fields["format"] == "jsonl" else ""
        raise DataError(
            f"data source {index} ({fields['path']!r}): unknown format {fields['format']!r}{hint}; "
            f"expected one of: {', '.join(SOURCE_FORMATS)}"
        )
    if not isinstance(fields["text_field"], str) or not fields["text_field"]:
        raise DataError(
            f"data source {index} ({fields['path']!r}): text_field must be a non-empty string, "
            f"got {fields['text_field']!r}"
        )
    return fields


def _folder(url: str) -> str:
    """The folder of a data file, local (made absolute, so workers elsewhere agree) or an fsspec URL."""
    if "://" in url and not url.startswith("file://"):
        return url.rsplit("/", 1)[0]
    return os.path.dirname(os.path.abspath(url.removeprefix("file://")))


def _check_policy(bad_rows: str) -> None:
    if bad_rows not in ("fail", "skip"):
        raise DataError(f"bad_rows must be 'fail' or 'skip', got {bad_rows!r}")


def warn_skipped(report: BadRowReport) -> None:
    """Warn once about the bad rows skipped while reading (nothing when there were none)."""
    if report.count:
        log.warning("%s; fix those rows, or set data.bad_rows: fail to stop at the first one", report.summary())


def _bad_row(on_bad_row: BadRowHandler | None, origin: str, reason: str) -> None:
    if on_bad_row is None:
        raise DataError(f"{origin}: {reason}")
    on_bad_row(origin, reason)


# ---- file readers -------------------------------------------------------------------------------------------


def _reader(url: str) -> Callable[[str, BadRowHandler], Iterator[Record]] | None:
    name = url
    for suffix in COMPRESSION_SUFFIXES:
        name = name.removesuffix(suffix)
    if name.endswith(".jsonl"):
        return _iter_jsonl
    if name.endswith(".json"):
        return _iter_json
    if name.endswith(".parquet") and name == url:
        return _iter_parquet
    return None


def _iter_jsonl(url: str, bad: BadRowHandler) -> Iterator[Record]:
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


def _iter_json(url: str, bad: BadRowHandler) -> Iterator[Record]:
    with fsspec.open(url, "rb", compression="infer") as file:
        head = file.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    if not head.startswith(b"["):  # a .json file holding JSON Lines, as many datasets ship them
        yield from _iter_jsonl(url, bad)
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


def _iter_parquet(url: str, bad: BadRowHandler) -> Iterator[Record]:
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


# ---- datasets (saved to disk, or loaded by name) ------------------------------------------------------------
