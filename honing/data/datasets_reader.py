"""Rows that ``datasets`` reads for honing's sources: a folder saved by ``save_to_disk`` (``folder`` or
``folder:split``), any other local folder as ``folder:split`` (``datasets.load_dataset``), and a Hugging Face Hub
dataset ``owner/name`` or ``owner/name:split``, streamed; a sliced split (``train[90%:]``) is read whole, then sliced
(``honing.data.split_slices``). ``Record`` is a row of any source with its origin (``honing.data.row_reader``)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import fsspec

from honing.data.split_slices import SPLIT_WITH_SLICE, is_sliced, slice_rows, split_name
from honing.errors import DataError

COMPRESSION_SUFFIXES = (".gz", ".bz2", ".xz")
SAVED_DATASET_MARKERS = ("state.json", "dataset_info.json", "dataset_dict.json")
DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".txt", ".csv", ".arrow") + COMPRESSION_SUFFIXES
HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
SPLIT_SUFFIX = re.compile(rf"^(?P<base>[^:]+):(?P<split>{SPLIT_WITH_SLICE})$")  # train, train[90%:]

# a subset (a dataset's configuration) exists only where datasets.load_dataset reads the path
SUBSET_NEEDS_LOAD_DATASET = (
    "subset names a configuration of a dataset read with datasets.load_dataset: a hub name or 'folder:split'"
)


@dataclass
class Record:
    """One row and where it came from: ``path:line`` (JSONL, 1-based) or ``path[index]`` (0-based)."""

    row: dict[str, Any]
    origin: str
    # The data file's folder, which relative image paths are relative to; None for rows of ``datasets``.
    # Not part of a record's identity: the origin already names the file.
    folder: str | None = field(default=None, compare=False)


def datasets_target(path: str, subset: str | None = None) -> Callable[[], Iterator[Record]] | None:
    """How to read ``path`` through ``datasets``, or None when it names plain files."""
    if "://" in path or os.path.exists(path):
        if not _is_saved_dataset(path):
            return None
        _no_subset(path, subset)
        return lambda: _iter_saved(path, None)
    base, split = path, None
    match = SPLIT_SUFFIX.match(path)
    if match:
        base, split = match["base"], match["split"]
        if os.path.isdir(base):
            if _is_saved_dataset(base):
                _no_subset(path, subset)
                return lambda: _iter_saved(base, split)
            return lambda: _iter_hub(base, split, subset)
    # A missing file such as "data/train.jsonl" also has the owner/name shape; it must fail as a missing path.
    if HUB_NAME.match(base) and not base.endswith(DATA_SUFFIXES):
        return lambda: _iter_hub(base, split or "train", subset)
    return None


def reads_with_datasets(path: str) -> bool:
    """True when ``path`` is read through ``datasets``: a saved dataset folder, ``folder:split``, a hub name."""
    return datasets_target(path) is not None


def _no_subset(path: str, subset: str | None) -> None:
    if subset is not None:  # a saved dataset is one configuration already
        raise DataError(f"{path!r}: {SUBSET_NEEDS_LOAD_DATASET} ({subset!r}); this path is a saved dataset folder")


def _is_saved_dataset(path: str) -> bool:
    fs, root = fsspec.core.url_to_fs(path)
    return fs.isdir(root) and any(fs.isfile(f"{root.rstrip('/')}/{marker}") for marker in SAVED_DATASET_MARKERS)


def _iter_saved(path: str, split: str | None) -> Iterator[Record]:
    datasets = _import_datasets(path)
    loaded = datasets.load_from_disk(path)
    where = path
    if isinstance(loaded, datasets.DatasetDict):
        split = split or ("train" if "train" in loaded else list(loaded)[0] if len(loaded) == 1 else None)
        if split is None or split_name(split) not in loaded:
            raise DataError(
                f"{path!r} holds the splits {', '.join(map(repr, loaded))}; name one as "
                f"'{path}:SPLIT'" + (f", not {split!r}" if split else "")
            )
        loaded, where = loaded[split_name(split)], f"{path}:{split}"
        loaded = slice_rows(loaded, split, where) if is_sliced(split) else loaded
    elif split is not None:
        raise DataError(f"{path!r} holds a single saved split, so it takes no ':{split}' suffix")
    for index, row in enumerate(loaded):
        yield Record(row, f"{where}[{index}]")


def _iter_hub(name: str, split: str, subset: str | None = None) -> Iterator[Record]:
    datasets = _import_datasets(name)
    shown = repr(name) if subset is None else f"{name!r} (subset {subset!r})"
    try:
        configuration = {} if subset is None else {"name": subset}  # load_dataset's name: the configuration
        loaded = datasets.load_dataset(name, split=split, streaming=not is_sliced(split), **configuration)
    except Exception as error:  # hub, network, subset and split errors all mean: this name cannot be read
        raise DataError(
            f"cannot load dataset {shown} split {split!r} with datasets.load_dataset "
            f"({type(error).__name__}: {error}); expected an existing path, or a Hugging Face Hub "
            "dataset 'owner/name' or 'owner/name:split'" + ("" if subset is None else " that has this subset")
        ) from error
    where = name if subset is None else f"{name}[{subset}]"
    for index, row in enumerate(loaded):
        yield Record(row, f"{where}:{split}[{index}]")


def _import_datasets(path: str) -> Any:
    try:
        import datasets
    except ImportError as error:
        raise DataError(f"reading {path!r} needs the 'datasets' package: pip install datasets") from error
    return datasets
