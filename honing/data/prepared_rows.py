"""The on-disk layout of prepared fine-tuning rows, one for every method: memory-mapped columns and an index.

A prepared folder (``honing prepare CONFIG --out DIR`` for sft, vl_sft, dpo and grpo, or an entry of the cache that
training prepares into) holds::

    index.json                  written last: its presence means every column is complete
    <column>.npy                a column's values, flat (``numpy.load(mmap_mode="r")`` reads it in place)
    <column>.offsets.npy        a ragged column's row starts (rows + 1 int64, the last one its length)
    prepare.log                 one JSON line per prepare run: which process tokenized how many rows, how long

A row is one example of a source, once, in file order (weights, the validation split and packing apply when the
rows are loaded, so one folder serves several runs). Every method's rows have ``status`` (``BUILT`` or
``REJECTED``), ``origin`` (file:line) and ``reason`` (why a row was rejected); the method adds its own columns
(``COLUMNS``). While a folder is prepared its rows are written in ranges under ``ranges/``, each range published
whole (``range-NNNNN.json`` last), so an interrupted prepare keeps the ranges it finished.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from honing.data.report import BadRowReport
from honing.errors import DataError

INDEX_FILE = "index.json"
INDEX_FORMAT = "honing-prepared-rows-v1"
RANGES_DIR = "ranges"
LOG_FILE = "prepare.log"
TEMP_PREFIX = ".tmp-"
BUILT, REJECTED = 0, 1

# kinds: ids (ragged integers), text (ragged UTF-8), json (ragged UTF-8 JSON values), scalar (one integer a row)
COMMON = {"status": ("scalar", "uint8"), "origin": ("text", "uint8"), "reason": ("text", "uint8")}
TOKENS = {"input_ids": ("ids", "int32"), "labels": ("ids", "int32"), "length": ("scalar", "int64")}
COLUMNS: dict[str, dict[str, tuple[str, str]]] = {
    "sft": {**COMMON, **TOKENS},
    "vl_sft": {
        **COMMON,
        **TOKENS,
        "last_image": ("scalar", "int64"),  # position of the last image token in the whole row, -1 without one
        "image_tokens": ("scalar", "int64"),
        "text": ("text", "uint8"),  # the rendered chat, image placeholders unexpanded
        "images": ("json", "uint8"),  # the image items (references, never pixels)
        "pixels_before": ("ids", "int64"),
        "pixels_after": ("ids", "int64"),
    },
    "dpo": {**COMMON, "prompt_ids": ("ids", "int32"), "chosen_ids": ("ids", "int32"), "rejected_ids": ("ids", "int32")},
    "kto": {**COMMON, "prompt_ids": ("ids", "int32"), "completion_ids": ("ids", "int32"), "label": ("scalar", "uint8")},
    "grpo": {**COMMON, "prompt_ids": ("ids", "int32"), "prompt": ("json", "uint8"), "columns": ("json", "uint8")},
}
# a reward model's pairs: DPO's, with each row's margin (null without one)
COLUMNS["reward"] = {**COLUMNS["dpo"], "margin": ("json", "uint8")}
# image prompts: GRPO's, with the rendered chat and the image references (never pixels)
COLUMNS["vl_grpo"] = {**COLUMNS["grpo"], "text": ("text", "uint8"), "images": ("json", "uint8")}
# image pairs: DPO's, with the rendered prompt and its image references (never pixels)
COLUMNS["vl_dpo"] = {**COLUMNS["dpo"], "text": ("text", "uint8"), "images": ("json", "uint8")}


def is_prepared_folder(path: str) -> bool:
    """True when ``path`` is a local folder holding a prepared-rows ``index.json`` (token shards are not)."""
    index = os.path.join(path, INDEX_FILE)
    if "://" in path or not os.path.isfile(index):
        return False
    try:
        with open(index, encoding="utf-8") as handle:
            return json.load(handle).get("format") == INDEX_FORMAT
    except (OSError, ValueError, AttributeError):
        return True  # an index we cannot read still marks the folder as prepared: opening it names the fault


@dataclass
class RowSource:
    """One source of a prepared folder: where its rows came from, its weight when prepared, and its row count."""

    fields: dict[str, Any]  # path (resolved), format, text_field, max_samples, weight
    rows: int


def write_range(folder: str, number: int, start: int, rows: Sequence[Mapping[str, Any]], method: str, key: str) -> None:
    """Write rows ``start..start+len(rows)`` as range ``number`` under ``folder/ranges``; its ``.json`` last."""
    target = os.path.join(folder, RANGES_DIR)
    os.makedirs(target, exist_ok=True)
    sizes = {}
    for name, (kind, dtype) in COLUMNS[method].items():
        values, offsets = column_arrays(rows, name, kind, dtype)
        _save(os.path.join(target, f"range-{number:05d}.{name}.npy"), values)
        if offsets is not None:
            _save(os.path.join(target, f"range-{number:05d}.{name}.offsets.npy"), offsets)
        sizes[name] = int(len(values))
    record = {"key": key, "start": start, "stop": start + len(rows), "sizes": sizes}
    publish_text(os.path.join(target, f"range-{number:05d}.json"), json.dumps(record))


def range_done(folder: str, number: int, start: int, stop: int, key: str) -> bool:
    """True when range ``number`` was published for these rows by a prepare of ``key``."""
    path = os.path.join(folder, RANGES_DIR, f"range-{number:05d}.json")
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return False
    return record.get("key") == key and record.get("start") == start and record.get("stop") == stop


def merge_ranges(folder: str, method: str, count: int, index: dict[str, Any]) -> None:
    """Join ranges ``0..count-1`` into one file per column, publish ``index.json`` and drop the ranges."""
    ranges = os.path.join(folder, RANGES_DIR)
    records = []
    for number in range(count):
        with open(os.path.join(ranges, f"range-{number:05d}.json"), encoding="utf-8") as handle:
            records.append(json.load(handle))
    rows = records[-1]["stop"] if records else 0
    columns = {}
    for name, (kind, dtype) in COLUMNS[method].items():
        total = sum(record["sizes"][name] for record in records)
        parts = [os.path.join(ranges, f"range-{number:05d}.{name}") for number in range(count)]
        _join(os.path.join(folder, f"{name}.npy"), [p + ".npy" for p in parts], total, dtype)
        if kind != "scalar":
            _join_offsets(os.path.join(folder, f"{name}.offsets.npy"), [p + ".offsets.npy" for p in parts], rows)
        columns[name] = {"kind": kind, "dtype": dtype, "values": total}
    publish_text(os.path.join(folder, INDEX_FILE), json.dumps({**index, "rows": rows, "columns": columns}, indent=1))
    shutil.rmtree(ranges, ignore_errors=True)


def publish_text(path: str, text: str) -> None:
    """Write ``path`` under a temporary name beside it, then rename it into place (readers see all or nothing)."""
    fd, temp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=TEMP_PREFIX)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    _publish(temp, path)


def _publish(temp: str, path: str) -> None:
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(temp, 0o666 & ~umask)  # mkstemp's 0600 would keep a shared cache from the other users' ranks
    os.replace(temp, path)


class PreparedRows:
    """The rows of a prepared folder, every column memory-mapped; ``row(i)`` gives one as a dict of plain values."""

    def __init__(self, folder: str):
        self.folder = folder
        self.index = read_index(folder)
        self.method: str = self.index["method"]
        self.sources = [RowSource(source["fields"], source["rows"]) for source in self.index["sources"]]
        self.rows: int = self.index["rows"]
        self.skipped = BadRowReport(**self.index.get("skipped", {}))  # bad rows skipped while reading the sources
        self.values: dict[str, np.ndarray] = {}
        self.offsets: dict[str, np.ndarray] = {}
        if self.method not in COLUMNS:
            raise DataError(f"{self._where(INDEX_FILE)}: unknown method {self.method!r}; prepare the folder again")
        for name, (kind, dtype) in COLUMNS[self.method].items():
            listed = self.index["columns"].get(name)
            if listed is None:
                raise DataError(f"{self._where(INDEX_FILE)}: lists no column {name!r}; prepare the folder again")
            self.values[name] = self._open(
                f"{name}.npy", dtype, (listed["values"],) if kind != "scalar" else (self.rows,)
            )
            if kind != "scalar":
                offsets = self._open(f"{name}.offsets.npy", "int64", (self.rows + 1,))
                if offsets[0] != 0 or offsets[-1] != listed["values"] or np.any(np.diff(offsets) < 0):
                    raise DataError(
                        f"{self._where(name + '.offsets.npy')}: row offsets do not fit {name}.npy; the folder is "
                        "damaged: prepare it again"
                    )
                self.offsets[name] = offsets

    def __len__(self) -> int:
        return self.rows

    def column(self, name: str) -> np.ndarray:
        """A column's flat values (memory-mapped)."""
        return self.values[name]

    def ragged(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """A ragged column's flat values and its rows' offsets (rows + 1), memory-mapped."""
        return self.values[name], self.offsets[name]

    def row(self, index: int) -> dict[str, Any]:
        """Row ``index`` as plain Python values: lists of ids, strings, decoded JSON, integers."""
        out: dict[str, Any] = {}
        for name, (kind, _) in COLUMNS[self.method].items():
            if kind == "scalar":
                out[name] = int(self.values[name][index])
                continue
            start, stop = self.offsets[name][index : index + 2]
            part = self.values[name][start:stop]
            if kind == "ids":
                out[name] = part.tolist()
            else:
                text = part.tobytes().decode("utf-8")
                out[name] = (json.loads(text) if text else None) if kind == "json" else text
        return out

    def _open(self, name: str, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
        path = os.path.join(self.folder, name)
        if not os.path.isfile(path):
            raise DataError(f"{path}: missing from the prepared folder; prepare it again")
        try:
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError, EOFError) as error:
            raise DataError(f"{path}: not a readable column ({error}); the file is damaged: prepare it again") from None
        if array.dtype != np.dtype(dtype) or array.shape != shape:
            raise DataError(
                f"{path}: holds {array.dtype} {array.shape}, the index says {dtype} {shape}; the file is damaged or "
                "from another prepare: prepare it again"
            )
        return array

    def _where(self, name: str) -> str:
        return os.path.join(self.folder, name)


def read_index(folder: str) -> dict[str, Any]:
    """A prepared folder's index; DataError naming ``index.json`` when it is missing or damaged."""
    path = os.path.join(folder, INDEX_FILE)
    if not os.path.isfile(path):
        raise DataError(
            f"{path}: missing; a prepared folder is written by `honing prepare CONFIG --out DIR` (an interrupted "
            "prepare has no index yet: run it again)"
        )
    try:
        with open(path, encoding="utf-8") as handle:
            index = json.load(handle)
        if index.get("format") != INDEX_FORMAT:
            raise ValueError(f"format {index.get('format')!r}, expected {INDEX_FORMAT!r}")
        for key in ("method", "key", "rows", "sources", "columns"):
            if key not in index:
                raise ValueError(f"no {key!r}")
    except (ValueError, AttributeError, OSError) as error:
        raise DataError(f"{path}: not a readable prepared-rows index ({error}); prepare the folder again") from None
    return index


def column_arrays(rows: Sequence[Mapping[str, Any]], name: str, kind: str, dtype: str) -> tuple[np.ndarray, Any]:
    """A column of ``rows`` (dicts) as flat values and, for a ragged column, offsets (None for a scalar one)."""
    if kind == "scalar":
        return np.asarray([row.get(name, 0) for row in rows], dtype=dtype), None
    if kind == "ids":
        parts = [np.asarray(row.get(name, ()), dtype=dtype) for row in rows]
    else:
        encode = (lambda value: json.dumps(value)) if kind == "json" else (lambda value: value)
        parts = [
            np.frombuffer(encode(row[name]).encode("utf-8"), dtype=np.uint8) if name in row else np.zeros(0, np.uint8)
            for row in rows
        ]
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([len(part) for part in parts], out=offsets[1:])
    values = np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
    return values.astype(dtype, copy=False), offsets


def _save(path: str, array: np.ndarray) -> None:
    fd, temp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=TEMP_PREFIX, suffix=".npy")
    with os.fdopen(fd, "wb") as handle:
        np.save(handle, array, allow_pickle=False)
    _publish(temp, path)


def _join(path: str, parts: Sequence[str], total: int, dtype: str) -> None:
    """Concatenate the ``.npy`` files ``parts`` into ``path`` in bounded memory (one part at a time)."""
    fd, temp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=TEMP_PREFIX, suffix=".npy")
    os.close(fd)
    out = np.lib.format.open_memmap(temp, mode="w+", dtype=dtype, shape=(total,)) if total else None
    position = 0
    for part in parts:
        values = np.load(part, allow_pickle=False)
        if out is not None:
            out[position : position + len(values)] = values
        position += len(values)
    if out is None:
        np.save(temp, np.zeros(0, dtype=dtype), allow_pickle=False)
    else:
        out.flush()
        del out
    _publish(temp, path)


def _join_offsets(path: str, parts: Sequence[str], rows: int) -> None:
    """The ranges' offsets as one array over every row: each range's shifted by the values before it."""
    out = np.zeros(rows + 1, dtype=np.int64)
    row = shift = 0
    for part in parts:
        offsets = np.load(part, allow_pickle=False)
        out[row : row + len(offsets)] = offsets + shift
        row += len(offsets) - 1
        shift += int(offsets[-1])
    _save(path, out)
