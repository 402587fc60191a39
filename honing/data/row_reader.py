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

import logging
import lzma
import os
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import numpy as np

from honing.data.column_mapping import mapped_row
from honing.data.datasets_reader import (  # noqa: F401  (SPLIT_SUFFIX, reads_with_datasets: re-exported)
    COMPRESSION_SUFFIXES,
    SPLIT_SUFFIX,
    SUBSET_NEEDS_LOAD_DATASET,
    Record,
    datasets_target,
    reads_with_datasets,
)
from honing.data.file_rows import BadRowHandler, file_reader
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
from honing.data.subset import seeded_subset
from honing.errors import DataError

log = logging.getLogger(__name__)

SOURCE_FORMATS = ("auto",) + EXAMPLE_FORMATS

BadRows = Literal["fail", "skip"]
Item = TypeVar("Item")
#: a row's items (a KTO pair gives two); a ``RowError`` says why the row is bad
RowItems = Callable[[Record], Sequence[Item]]
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
        reader = file_reader(url)
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


@dataclass(frozen=True)
class SourceKind(Generic[Item]):
    """What one kind of row is read as: its items' name (``data source 0 ('a.jsonl') holds no preference pairs``),
    what a named data set must give for it, and per source (its fields and index) how a row becomes its items."""

    what: str
    reads: tuple[Gives, ...]
    row_items: Callable[[dict[str, Any], int], RowItems[Item]]


class SourceFormat:
    """A source's format: the one its config names, else the one its first readable row announces (a source holds
    one format, as LLaMA-Factory's and TRL's files do)."""

    def __init__(self, named: str | None, detect: Callable[[Mapping[str, Any]], str]):
        self.name, self.detect = named, detect
        self.detected_at: str | None = None  # the origin of the row it was detected from

    def of(self, record: Record) -> str:
        """The source's format, detected from ``record`` when none is known yet (a ``RowError`` if it names none)."""
        if self.name is None:
            self.name, self.detected_at = self.detect(record.row), record.origin
        return self.name


def named_format(fields: Mapping[str, Any], index: int, formats: Sequence[str], what: str) -> str | None:
    """The format a source's config names, None for ``auto``; a ``DataError`` when the kind reads no such rows."""
    format = fields["format"]
    if format == "auto":
        return None
    if format not in formats:
        raise DataError(
            f"data source {index} ({fields['path']!r}): format {format!r} holds no {what}; expected auto or one of: "
            f"{', '.join(name for name in formats if name != 'auto')}"
        )
    return format


def read_items(
    sources: Sequence[Mapping[str, Any] | object],
    kind: SourceKind[Item],
    *,
    bad_rows: BadRows | None = "fail",
    fields_of: Callable[[Mapping[str, Any] | object, int], dict[str, Any]] = source_fields,
) -> tuple[list[list[tuple[Item, str]]], BadRowReport]:
    """Each source's ``(item, origin)`` pairs once, in file order (from at most ``max_samples`` rows, the first valid
    ones), and the bad rows skipped; weights are not applied. ``bad_rows`` None: a bad row always fails (GRPO's
    prompts have no ``data.bad_rows``)."""
    if bad_rows is not None:
        _check_policy(bad_rows)
    report = BadRowReport()
    found = [
        list(source_items(fields_of(source, index), index, kind, bad_rows=bad_rows, report=report))
        for index, source in enumerate(sources)
    ]
    return found, report


def source_items(
    fields: dict[str, Any], index: int, kind: SourceKind[Item], *, bad_rows: BadRows | None, report: BadRowReport
) -> Iterator[tuple[Item, str]]:
    """One source's ``(item, origin)`` pairs, streamed: the row loop every kind of row is read through. A bad row
    fails naming its ``file:line`` and the reason, or (``bad_rows: skip``) is counted in ``report``."""
    path = fields["path"]

    def bad(origin: str, reason: str) -> None:
        if bad_rows is None:
            raise DataError(f"{origin}: {reason}") from None
        if bad_rows == "fail":
            raise DataError(f"{origin}: {reason}; set data.bad_rows: skip to skip such rows") from None
        report.add(path, origin, reason)

    row_items = kind.row_items(fields, index)

    def valid_rows() -> Iterator[tuple[list[Item], str]]:
        for record in source_records(fields, index, kind.reads, on_bad_row=bad):
            try:
                items = row_items(record)
            except RowError as error:
                bad(record.origin, error.reason)
                continue
            yield items, record.origin

    limit, seed = fields["max_samples"], fields.get("sample_seed")
    found: Iterable[tuple[list[Item], str]] = valid_rows()
    if limit is not None and seed is not None:  # a random subset: every row is read to choose among them
        found = seeded_subset(found, limit, seed)
    rows = 0
    for items, origin in found:
        for item in items:
            yield item, origin
        rows += 1
        if rows == limit:  # stop reading: max_samples exists to sample a head of a large source
            return
    if not rows:
        skipped = report.per_source.get(path, 0)
        raise DataError(
            f"data source {index} ({path!r}) holds no {kind.what}"
            + (f" ({skipped} bad row(s) skipped: {report.summary()})" if skipped else "")
        )


def example_kind(check_images: ImageCheck | None = None) -> SourceKind[Example]:
    """Fine-tuning examples: conversations (with images) or texts, in any of ``EXAMPLE_FORMATS``; with
    ``check_images`` (``honing.data.vision.images.check_images``) a row whose images do not all open is bad."""

    def row_items(fields: dict[str, Any], index: int) -> RowItems[Example]:
        text_field = fields["text_field"]
        named = None if fields["format"] == "auto" else fields["format"]
        format = SourceFormat(named, lambda row: detect_format(row, text_field=text_field))

        def items(record: Record) -> list[Example]:
            try:
                example = to_example(record.row, format.of(record), text_field=text_field)
            except RowError as error:
                raise RowError(_mismatch(record.row, format, text_field) or error.reason) from None
            if isinstance(example, Conversation) and example.images():
                if record.folder is not None:
                    example = resolve_image_paths(example, record.folder)
                problems = check_images(example) if check_images else []
                if problems:  # found now, while the data set is built, not by a loader worker mid-epoch
                    raise RowError("; ".join(problems))
            return [example]

        return items

    return SourceKind("examples", ("conversations", "image conversations"), row_items)


def read_sources(
    sources: Sequence[Mapping[str, Any] | object],
    *,
    bad_rows: BadRows = "fail",
    check_images: ImageCheck | None = None,
) -> tuple[list[list[tuple[Example, str]]], BadRowReport]:
    """Each source's ``(example, origin)`` pairs once, in file order (at most ``max_samples``, the first valid
    ones), and the bad rows skipped; weights are not applied (``load_examples`` and prepared rows apply them)."""
    return read_items(sources, example_kind(check_images), bad_rows=bad_rows, fields_of=_fields)


def weighted_items(
    sources: Sequence[Mapping[str, Any] | object], found: Sequence[Sequence[tuple[Item, str]]], *, seed: int
) -> list[tuple[Item, str]]:
    """Each source's ``(item, origin)`` pairs (``read_items``) repeated by the source's weight, sources in order."""
    out: list[tuple[Item, str]] = []
    for index, (source, items) in enumerate(zip(sources, found)):
        picks = weighted_indices(len(items), source_fields(source, index)["weight"], seed=seed, source_index=index)
        out.extend(items[i] for i in picks)
    return out


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
    bad_rows: BadRows = "fail",
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
    bad_rows: BadRows = "fail",
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
    kind = example_kind(check_images)
    streams = [source_items(f, index, kind, bad_rows=bad_rows, report=report) for index, f in enumerate(fields)]
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


def _mismatch(row: Mapping[str, Any], format: SourceFormat, text_field: str) -> str | None:
    """Why an auto-detected source rejects a row that is in another format, if it is."""
    if format.detected_at is None:
        return None
    try:
        other = detect_format(row, text_field=text_field)
    except RowError:
        return None
    if other == format.name:
        return None
    # LLaMA-Factory files mix rows with and without images; format mllm reads both.
    if other == "mllm":
        fix = "set the source's format: mllm, which reads rows without images too"
    else:
        fix = "a source holds one format, so split the files into two sources"
    return (
        f"row is in format {other!r} but the source's format is {format.name!r} (detected from {format.detected_at}); "
        + fix
    )


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
