"""Where a data source's rows come from, for every kind of data: the files a path names, a source's fields, and
how a weight repeats its items."""

from __future__ import annotations

import json
import math
import os
import sys
import sysconfig
from collections.abc import Mapping
from typing import Any

import fsspec
import numpy as np
from fsspec.implementations.local import LocalFileSystem

from honing.data.column_mapping import check_mapping
from honing.data.named.registry import hub_dataset, named_dataset
from honing.errors import DataError

STDLIB_PLACEHOLDER = "{stdlib}"
JSONL_SUFFIXES = (".jsonl", ".json")
SOURCE_FIELDS = {
    "path": None,
    "format": "auto",
    "weight": 1.0,
    "proportion": None,
    "text_field": "text",
    "max_samples": None,
    "sample_seed": None,
    "subset": None,
    "dataset": None,
    "columns": None,
    "roles": None,
}


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
    seed = fields["sample_seed"]
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise DataError(f"data source {index} ({path!r}): sample_seed must be an integer >= 0 or null, got {seed!r}")
    if seed is not None and max_samples is None:
        raise DataError(
            f"data source {index} ({path!r}): sample_seed chooses max_samples rows at random; set max_samples"
        )
    subset = fields["subset"]
    if subset is not None and (not isinstance(subset, str) or not subset):
        raise DataError(f"data source {index} ({path!r}): subset must be a non-empty string or null, got {subset!r}")
    fields["weight"] = float(weight)
    where = f"data source {index} ({path!r})"
    fields["columns"] = check_mapping(fields["columns"], "columns", where)
    fields["roles"] = check_mapping(fields["roles"], "roles", where)
    if fields["columns"] and fields.get("dataset") is not None:
        raise DataError(f"{where}: a named data set reads its own columns; give dataset or columns, not both")
    return named_fields(fields, index)


def named_fields(fields: dict[str, Any], index: int) -> dict[str, Any]:
    """The fields with their named data set resolved: ``dataset`` as honing's name (or the data set whose hub id the
    path is, when the format is ``auto``), and the hub's subset and split where the path is that hub id."""
    dataset, path = fields.get("dataset"), fields["path"]
    if dataset is not None and (not isinstance(dataset, str) or not dataset):
        raise DataError(f"data source {index} ({path!r}): dataset must be a named data set or null, got {dataset!r}")
    try:
        entry = named_dataset(dataset) if dataset is not None else None
    except DataError as error:
        raise DataError(f"data source {index} ({path!r}): {error}") from None
    is_hub_id = not os.path.exists(path.split(":", 1)[0]) and hub_dataset(path) is not None
    if entry is None and is_hub_id and fields.get("format", "auto") == "auto":
        entry = hub_dataset(path)
    if entry is None:
        return fields
    fields = {**fields, "dataset": entry.name}
    if is_hub_id and hub_dataset(path) is entry:  # the hub data set itself: its own configuration and split
        if fields.get("subset") is None and entry.subset is not None:
            fields["subset"] = entry.subset
        if ":" not in path and entry.split is not None:
            fields["path"] = f"{path}:{entry.split}"
    return fields


def short_json(value: Any, limit: int = 60) -> str:
    """``value`` as JSON, cut to ``limit`` characters for an error message."""
    text = json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def row_text(row: Any, text_field: str, where: str) -> str:
    """The string ``row[text_field]`` of a JSON row read at ``where`` (``path:line``); a row that is no object,
    lacks the field or holds no string there is an error naming the place and the field."""
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(row).__name__} {short_json(row)}")
    if text_field not in row:
        raise DataError(
            f"{where}: no field {text_field!r} (fields: {', '.join(map(repr, row)) or 'none'}); "
            "set the source's text_field to the field holding the text"
        )
    text = row[text_field]
    if not isinstance(text, str):
        raise DataError(f"{where}: field {text_field!r} is {type(text).__name__} {short_json(text)}, expected a string")
    return text
