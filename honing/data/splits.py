"""Where a fine-tuning method's rows come from: prepared folders named as sources (``{path: DIR}``), the cache that
training prepares into once (one rank per node; the others wait for the published index by polling the file
system, then meet at a barrier), or memory (``data.cache_rows: false``).

Whatever the origin, a split is a table of rows (one per example of a source, in file order) and the row indices
training uses: each source repeated by its weight (``honing.data.row_reader.weighted_picks``), then the held-out
split. The row kind (``honing.data.row_kind``) fits those rows to ``data.seq_len`` and counts them, so the rows, the
drops, the rejections and the data report are the same from every origin.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from honing.data.mixture import mixed_picks
from honing.data.prepare_finetune import (
    build_rows,
    cache_folder,
    find_prepared,
    prepare_rows,
    rows_key,
    wait_for_prepared,
)
from honing.data.prepared_rows import COLUMNS, PreparedRows, RowSource, column_arrays, is_prepared_folder
from honing.data.report import MAX_REASONS, BadRowReport
from honing.data.row_reader import warn_skipped, weighted_picks
from honing.data.sources import named_fields
from honing.data.text.corpus import split_documents
from honing.distributed import barrier, get_local_rank, is_distributed
from honing.errors import ConfigError, DataError

if TYPE_CHECKING:
    from honing.config.data_schema import DataSection, SourceSection, SplitSection
    from honing.data.row_kind import RowKind


class MemoryRows:
    """Rows built in this process, read like a prepared folder's."""

    def __init__(self, method: str, rows: list[dict[str, Any]], sources: list[RowSource], skipped: BadRowReport):
        self.method, self.rows, self.sources, self.skipped = method, rows, sources, skipped
        self._columns: dict[str, tuple[np.ndarray, Any]] = {}

    def __len__(self) -> int:
        return len(self.rows)

    def row(self, index: int) -> dict[str, Any]:
        """Row ``index`` (its columns)."""
        return self.rows[index]

    def column(self, name: str) -> np.ndarray:
        """A column's flat values."""
        return self._arrays(name)[0]

    def ragged(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """A ragged column's flat values and its rows' offsets."""
        return self._arrays(name)

    def _arrays(self, name: str) -> tuple[np.ndarray, Any]:
        if name not in self._columns:
            self._columns[name] = column_arrays(self.rows, name, *COLUMNS[self.method][name])
        return self._columns[name]


class JoinedRows:
    """Several tables read as one, their sources in order (a split listing several prepared folders)."""

    def __init__(self, tables: Sequence[PreparedRows]):
        self.tables = list(tables)
        self.starts = [0]
        for table in self.tables:
            self.starts.append(self.starts[-1] + len(table))
        self.sources = [source for table in self.tables for source in table.sources]
        self.skipped = BadRowReport()
        for table in self.tables:
            self.skipped.count += table.skipped.count
            room = MAX_REASONS - len(self.skipped.first_reasons)
            self.skipped.first_reasons += table.skipped.first_reasons[: max(room, 0)]
            for path, count in table.skipped.per_source.items():
                self.skipped.per_source[path] = self.skipped.per_source.get(path, 0) + count

    def __len__(self) -> int:
        return self.starts[-1]

    def row(self, index: int) -> dict[str, Any]:
        """Row ``index`` of the table holding it."""
        table = bisect.bisect_right(self.starts, index) - 1
        return self.tables[table].row(index - self.starts[table])

    def column(self, name: str) -> np.ndarray:
        """A scalar column over every table."""
        return np.concatenate([table.column(name) for table in self.tables])

    def ragged(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """A ragged column over every table: values end to end, offsets shifted to match."""
        parts = [table.ragged(name) for table in self.tables]
        shifts = np.cumsum([0] + [len(values) for values, _ in parts[:-1]])
        offsets = np.concatenate(
            [parts[0][1][:1]] + [offsets[1:] + shift for (_, offsets), shift in zip(parts, shifts)]
        )
        return np.concatenate([values for values, _ in parts]), offsets


#: the rows a row kind fits: a prepared folder, rows built in this process, or several prepared folders as one
RowTable = PreparedRows | MemoryRows | JoinedRows


def read_splits(
    kind: RowKind, data: DataSection, *, seed: int, cache_dir: str, validation: bool = True, progress: bool = False
) -> dict[str, tuple[RowTable, list[int]]]:
    """Each split's table and the row indices training uses (weighted; validation, unless not asked for, from its
    own sources or held out of the training rows). ``data`` is the run's ``data`` section."""
    reader = SplitReader(kind, data, cache_dir=cache_dir, progress=progress)
    train, train_weights = reader.table(data.train.sources, "train")
    splits = {"train": (train, _picks(train, train_weights, data.train, seed, "data.train"))}
    if validation and data.validation is not None:
        held_out, weights = reader.table(data.validation.sources, "validation")
        splits["validation"] = (held_out, _picks(held_out, weights, data.validation, seed, "data.validation"))
    elif validation and data.validation_split > 0:
        kept, held_out = split_documents(splits["train"][1], data.validation_split, seed=seed)
        splits = {"train": (train, kept), "validation": (train, held_out)}
    if is_distributed() and data.cache_rows:
        barrier()  # every rank has its rows: the collectives that follow start together
    return splits


class SplitReader:
    """A split's rows for one kind: prepared folders as they are, raw sources through the cache (or memory)."""

    def __init__(self, kind: RowKind, data: DataSection, *, cache_dir: str, progress: bool = False):
        self.kind, self.data, self.cache_dir, self.progress = kind, data, cache_dir, progress

    def table(self, sources: Sequence[SourceSection], split: str) -> tuple[RowTable, list[float]]:
        """A split's rows and each of their sources' weight."""
        prepared = [is_prepared_folder(source.path) for source in sources]
        if any(prepared) and not all(prepared):
            raise ConfigError(
                f"data.{split}.sources: prepared folders cannot be mixed with raw sources; prepare every source "
                "(`honing prepare CONFIG --out DIR`) or list raw sources only"
            )
        if all(prepared):
            tables = [self.open_prepared(source.path, f"data.{split}.sources[{i}]") for i, source in enumerate(sources)]
            weights = [
                inner.fields["weight"] * source.weight
                for table, source in zip(tables, sources)
                for inner in table.sources
            ]
            table = tables[0] if len(tables) == 1 else JoinedRows(tables)
        else:
            fields = self.kind.source_fields(sources)
            table = self.cached(fields) if self.data.cache_rows else self.in_memory(fields)
            weights = [f["weight"] for f in fields]
        warn_skipped(table.skipped)
        return table, weights

    def open_prepared(self, folder: str, where: str) -> PreparedRows:
        """A prepared folder checked against this run: the method, the settings that made its rows, its cut."""
        rows, kind = PreparedRows(folder), self.kind
        index = rows.index
        if rows.method != kind.method:
            raise DataError(
                f"{where} ({folder!r}): holds {rows.method} rows; this run reads {kind.method} rows: prepare it "
                "with this config"
            )
        theirs = index["settings"]
        other = [name for name, value in kind.settings().items() if theirs.get(name) != value]
        if other:
            raise DataError(
                f"{where} ({folder!r}): prepared with another {' and '.join(other)} than this run's (the settings "
                f"that made it: {json.dumps(theirs)[:200]}); prepare it again with this config (`honing prepare "
                "CONFIG --out DIR`)"
            )
        seq_len = self.data.seq_len
        if index["seq_len"] is not None and index["seq_len"] < seq_len:
            raise DataError(
                f"{where} ({folder!r}): rows were cut at {index['seq_len']} tokens, shorter than data.seq_len "
                f"({seq_len}); prepare it again with data.seq_len={seq_len} or more"
            )
        return rows

    def cached(self, fields: list[dict[str, Any]]) -> PreparedRows:
        """The sources' rows from the cache, prepared now if they are not there (by one rank per node)."""
        kind, seq_len = self.kind, self.data.seq_len
        key = rows_key(kind.method, kind.settings(), fields, kind.stamps(fields))
        found = find_prepared(self.cache_dir, kind.method, key, seq_len)
        if found is not None:
            try:
                return PreparedRows(found)
            except DataError as error:
                raise DataError(f"{error} (a damaged cache entry: remove {found} and run again)") from None
        if is_distributed() and get_local_rank() != 0:
            return PreparedRows(wait_for_prepared(self.cache_dir, kind.method, key, seq_len, who="local rank 0"))
        rows, _ = prepare_kind(
            kind, cache_folder(self.cache_dir, kind.method, key, kind.cut), fields, key=key, progress=self.progress
        )
        return rows

    def in_memory(self, fields: list[dict[str, Any]]) -> MemoryRows:
        """The sources' rows built here, in this process (``data.cache_rows: false``)."""
        found, skipped = self.kind.read(fields)
        rows = build_rows(self.kind.build, [item for per_source in found for item in per_source])
        sources = [RowSource(dict(f), len(items)) for f, items in zip(fields, found)]
        return MemoryRows(self.kind.method, rows, sources, skipped)


def prepare_kind(
    kind: RowKind,
    out_dir: str,
    fields: list[dict[str, Any]],
    *,
    key: str | None = None,
    workers: int | None = None,
    progress: bool = False,
) -> tuple[PreparedRows, bool]:
    """``kind``'s rows of the sources ``fields`` prepared into ``out_dir`` (kept when it already holds them)."""
    return prepare_rows(
        out_dir,
        method=kind.method,
        key=key or rows_key(kind.method, kind.settings(), fields, kind.stamps(fields)),
        settings=kind.settings(),
        sources=fields,
        read=lambda: kind.read(fields),
        build=kind.build,
        cut=kind.cut,
        workers=workers,
        progress=progress,
    )


def _picks(table: RowTable, weights: list[float], split: SplitSection, seed: int, where: str) -> list[int]:
    """The rows a split uses: its mixture's draws, or each source's rows repeated by its weight."""
    if split.mixture is None:
        return _weighted(table, weights, seed)
    if isinstance(table, JoinedRows):  # prepared folders: each configured folder is one source of the mixture
        counts = [len(part) for part in table.tables]
    elif len(split.sources) == 1:
        counts = [len(table)]
    else:
        counts = [source.rows for source in table.sources]
    return mixed_picks(counts, split.sources, split.mixture, seed=seed, where=where)


def _weighted(table: RowTable, weights: list[float], seed: int) -> list[int]:
    counts = [source.rows for source in table.sources]
    return weighted_picks(counts, weights, [source.fields["path"] for source in table.sources], seed=seed)


def resolve_sources(
    sources: Sequence[Any],
    cache_dir: str,
    *,
    generated: Callable[[str], bool],
    write_generated: Callable[[str, str], str],
    generated_format: str,
) -> list[dict[str, Any]]:
    """The configured sources' fields; a prepared folder stands for the raw sources it was made from (the
    generation eval reads them), and a path ``generated`` recognises is written to ``cache_dir`` by
    ``write_generated`` and read back in ``generated_format``."""
    resolved = []
    for index, source in enumerate(sources):
        # a name labels metrics, not rows; a named data set is resolved now, so that it keys the prepared rows
        # an olmOCR source's own pipeline options when given (absent otherwise, so other sources keep their keys)
        own = {"pdf_pages"} if getattr(source, "pdf_pages", None) is None else set()
        fields = named_fields(source.model_dump(exclude={"name", *own}), index)
        if is_prepared_folder(fields["path"]):
            inner = PreparedRows(fields["path"]).sources
            resolved += [{**row.fields, "weight": row.fields["weight"] * fields["weight"]} for row in inner]
            continue
        if generated(fields["path"]):
            fields["path"] = write_generated(fields["path"], cache_dir)
            fields["format"] = generated_format
        resolved.append(fields)
    return resolved
