"""Validation sources evaluated one by one: each source's rows of the validation split and the name its metrics
take (``eval/<name>/loss``), as olmOCR's users pick a best model per validation set."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from typing import Any

from honing.data.eval_batches import SourceBatches
from honing.data.report import DataReport
from honing.data.splits import JoinedRows, RowTable

Part = tuple[Any, list[int]]  # a table and the row indices taken from it


def source_names(sources: Sequence[Any]) -> list[str]:
    """Each source's metric name: its ``name``, else its file's stem (``generated:TASK``: the task); a name met
    twice gets the source's index."""
    names = [source.name or _stem(source.path) for source in sources]
    return [f"{name}_{index}" if names.count(name) > 1 else name for index, name in enumerate(names)]


def validation_parts(sources: Sequence[Any], split: Part) -> list[tuple[str | None, Part]]:
    """The validation split cut by source when ``data.validation`` lists several sources or names one (as a
    Hugging Face eval set named ``x`` gives ``eval_x_loss``), else whole (``None``). A source whose weight leaves
    it no rows has no part. ``sources``: ``data.validation.sources`` (none for a held-out split)."""
    if len(sources) < 2 and not any(source.name for source in sources):
        return [(None, split)]
    table, indices = split
    ends, end = [], 0
    for size in _source_sizes(table, len(sources)):
        end += size
        ends.append(end)
    parts = []
    for name, start, stop in zip(source_names(sources), [0, *ends], ends):
        rows = [index for index in indices if start <= index < stop]
        if rows:
            parts.append((name, (table, rows)))
    return parts


def validation_batches(
    sources: Sequence[Any], split: Part, build: Callable[[Part], tuple[Any, DataReport]]
) -> tuple[Any, DataReport | None]:
    """``build``'s validation batches and report of the whole split, or of each source (``SourceBatches``) when there
    are several, with the sources' reports summed (None: a row kind without reports)."""
    parts = validation_parts(sources, split)
    if parts[0][0] is None:
        return build(parts[0][1])
    batches, reports = {}, []
    for name, part in parts:
        batches[name], report = build(part)
        reports.append(report)
    return SourceBatches(batches), DataReport.merged(reports) if None not in reports else None


def _source_sizes(table: RowTable, count: int) -> list[int]:
    """Rows per configured source: a prepared folder may hold several sources of its own."""
    if isinstance(table, JoinedRows):
        return [len(inner) for inner in table.tables]
    sizes = [source.rows for source in table.sources]
    return sizes if len(sizes) == count else [sum(sizes)]


def _stem(path: str) -> str:
    if path.startswith("generated:"):
        path = path.removeprefix("generated:").split("?")[0]
    base = os.path.basename(path.rstrip("/")) or path
    for suffix in (".gz", ".bz2", ".xz", ".jsonl", ".json", ".parquet", ".txt", ".csv", ".arrow"):
        base = base.removesuffix(suffix)
    return re.sub(r"[^\w.-]+", "_", base).strip("_") or "source"
