"""Where a fine-tuning recipe's rows come from: prepared folders named as sources (``{path: DIR}``), the cache that
training prepares into once (one rank per node; the others wait for the published index by polling the file
system, then meet at a barrier), or memory (``data.cache_rows: false``).

Whatever the origin, a split is a table of rows (one per example of a source, in file order) and the row indices
training uses: each source repeated by its weight (``honing.data.finetune_rows.weighted_picks``), then the held-out
split. The recipe's ``tokenize_rows`` fits those rows to ``data.seq_len`` and counts them, so the rows, the
drops, the rejections and the data report are the same from every origin.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from honing.data.finetune_rows import warn_skipped, weighted_picks
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
from honing.data.text.corpus import split_documents
from honing.distributed import barrier, get_local_rank, is_distributed
from honing.errors import ConfigError, DataError


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

    def __init__(self, tables: Sequence[Any]):
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


def split_rows(recipe: Any, *, validation: bool = True) -> dict[str, tuple[Any, list[int]]]:
    """Each split's table and the row indices training uses (weighted; validation, unless not asked for, from its
    own sources or held out of the training rows)."""
    data, seed = recipe.config.data, recipe.config.trainer.seed
    train, train_weights = row_table(recipe, data.train.sources, "train")
    splits = {"train": (train, _weighted(train, train_weights, seed))}
    if validation and data.validation is not None:
        held_out, weights = row_table(recipe, data.validation.sources, "validation")
        splits["validation"] = (held_out, _weighted(held_out, weights, seed))
    elif validation and data.validation_split > 0:
        kept, held_out = split_documents(splits["train"][1], data.validation_split, seed=seed)
        splits = {"train": (train, kept), "validation": (train, held_out)}
    if is_distributed() and recipe.config.data.cache_rows:
        barrier()  # every rank has its rows: the collectives that follow start together
    return splits


def row_table(recipe: Any, sources: Sequence[Any], split: str) -> tuple[Any, list[float]]:
    """A split's rows and each of their sources' weight: prepared folders as they are, raw sources through the
    cache (or memory)."""
    prepared = [is_prepared_folder(source.path) for source in sources]
    if any(prepared) and not all(prepared):
        raise ConfigError(
            f"data.{split}.sources: prepared folders cannot be mixed with raw sources; prepare every source "
            "(`honing prepare CONFIG --out DIR`) or list raw sources only"
        )
    if all(prepared):
        tables = [open_prepared(recipe, source.path, f"data.{split}.sources[{i}]") for i, source in enumerate(sources)]
        weights = [
            inner.fields["weight"] * source.weight for table, source in zip(tables, sources) for inner in table.sources
        ]
        table = tables[0] if len(tables) == 1 else JoinedRows(tables)
    else:
        fields = recipe.source_list(sources)
        table = cached_rows(recipe, fields) if recipe.config.data.cache_rows else memory_rows(recipe, fields)
        weights = [f["weight"] for f in fields]
    warn_skipped(table.skipped)
    return table, weights


def open_prepared(recipe: Any, folder: str, where: str) -> PreparedRows:
    """A prepared folder checked against this run: the method, the settings that made its rows, its cut length."""
    rows = PreparedRows(folder)
    index = rows.index
    if rows.method != recipe.row_method:
        raise DataError(
            f"{where} ({folder!r}): holds {rows.method} rows; method {recipe.config.method} needs "
            f"{recipe.row_method} rows: prepare it with this config"
        )
    theirs = index["settings"]
    other = [name for name, value in recipe.row_settings().items() if theirs.get(name) != value]
    if other:
        raise DataError(
            f"{where} ({folder!r}): prepared with another {' and '.join(other)} than this run's (the settings that "
            f"made it: {json.dumps(theirs)[:200]}); prepare it again with this config (`honing prepare CONFIG --out "
            "DIR`)"
        )
    seq_len = recipe.config.data.seq_len
    if index["seq_len"] is not None and index["seq_len"] < seq_len:
        raise DataError(
            f"{where} ({folder!r}): rows were cut at {index['seq_len']} tokens, shorter than data.seq_len ({seq_len}); "
            f"prepare it again with data.seq_len={seq_len} or more"
        )
    return rows


def cached_rows(recipe: Any, fields: list[dict[str, Any]]) -> PreparedRows:
    """The sources' rows from the cache, prepared now if they are not there (by one rank per node)."""
    cache, method, seq_len = recipe.cache_dir(), recipe.row_method, recipe.config.data.seq_len
    key = rows_key(method, recipe.row_settings(), fields, recipe.input_stamps(fields))
    found = find_prepared(cache, method, key, seq_len)
    if found is not None:
        try:
            return PreparedRows(found)
        except DataError as error:
            raise DataError(f"{error} (a damaged cache entry: remove {found} and run again)") from None
    if is_distributed() and get_local_rank() != 0:
        return PreparedRows(wait_for_prepared(cache, method, key, seq_len, who="local rank 0"))
    rows, _ = prepare_rows(
        cache_folder(cache, method, key, recipe.row_cut()),
        method=method,
        key=key,
        settings=recipe.row_settings(),
        sources=fields,
        read=lambda: recipe.read_items(fields),
        build=recipe.build_rows,
        cut=recipe.row_cut(),
        progress=recipe.show_progress(),
    )
    return rows


def memory_rows(recipe: Any, fields: list[dict[str, Any]]) -> MemoryRows:
    """The sources' rows built here, in this process (``data.cache_rows: false``)."""
    found, skipped = recipe.read_items(fields)
    rows = build_rows(recipe.build_rows, [item for per_source in found for item in per_source])
    sources = [RowSource(dict(f), len(items)) for f, items in zip(fields, found)]
    return MemoryRows(recipe.row_method, rows, sources, skipped)


def _weighted(table: Any, weights: list[float], seed: int) -> list[int]:
    counts = [source.rows for source in table.sources]
    return weighted_picks(counts, weights, [source.fields["path"] for source in table.sources], seed=seed)
