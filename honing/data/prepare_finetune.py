"""Prepare fine-tuning rows once: worker processes build disjoint ranges of a split's examples into a prepared folder
(``honing.data.prepared_rows``), keyed by the inputs' content and every setting that changes a row.

The key hashes each source's fields and its files' content digests (``honing.data.text.prepare_inputs``, as for
pretraining shards), the method and the settings the recipe names (tokenizer or processor, chat template, label
policy). A folder already holding the key is read as it is; ranges an interrupted prepare of the same key
published are kept. Training prepares into ``data.cache_dir/prepared``, one entry per key and cut length, so a run
with a shorter ``seq_len`` reads an entry cut longer.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from honing.cache import content_hash
from honing.data.prepared_rows import (
    BUILT,
    INDEX_FILE,
    INDEX_FORMAT,
    LOG_FILE,
    REJECTED,
    PreparedRows,
    RowSource,
    merge_ranges,
    range_done,
    read_index,
    write_range,
)
from honing.data.progress import WorkProgress
from honing.data.report import BadRowReport
from honing.data.text.prepare_inputs import source_files
from honing.data.worker_pool import Report, run_tasks
from honing.errors import DataError

log = logging.getLogger(__name__)

# Bump when a method's rows or the layout change, so folders made before are prepared again.
PREPARE_ROWS_VERSION = "prepared-rows-v1"
RANGE_ROWS = 2048  # examples a worker builds and publishes at once: what an interrupted prepare loses at most
CACHE_SUBDIR = "prepared"
POLL_SECONDS = 0.2
LOG_SECONDS = 30.0  # between two progress lines where no progress bar is shown
PROGRESS_ROWS = 256  # rows built between two progress reports (a multiple of a VL processor call's 64 rows)
SOURCE_KEYS = ("path", "format", "text_field", "max_samples")  # what a source's rows depend on (not its weight)
# and its subset, named data set, column mapping and subset seed, where it has them (left out otherwise, so that
# folders prepared before keep their key)
OPTIONAL_SOURCE_KEYS = ("subset", "dataset", "columns", "roles", "sample_seed")

#: reads the split's sources: each source's ``(item, origin)`` pairs in file order, and the bad rows skipped
ReadItems = Callable[[], tuple[list[list[tuple[Any, str]]], BadRowReport]]
#: the rows (their columns) of a run of items, one each, in order; a DataError in place of a row rejects its item
#: (its message kept as the row's reason)
BuildRows = Callable[[list[Any]], list["dict[str, Any] | DataError"]]


def rows_key(
    method: str, settings: Mapping[str, Any], sources: Sequence[Mapping[str, Any]], extra: Sequence[str] = ()
) -> str:
    """The content hash of what a split's rows are made from: the method, its settings, each source's fields and
    its files' sizes and content digests, and ``extra`` (files the rows name, such as images)."""
    parts = [PREPARE_ROWS_VERSION, method, json.dumps(settings, sort_keys=True)]
    for fields in sources:
        keyed = {key: fields[key] for key in SOURCE_KEYS}
        keyed.update({key: fields[key] for key in OPTIONAL_SOURCE_KEYS if fields.get(key) not in (None, {})})
        parts.append(json.dumps(keyed, sort_keys=True))
        parts.extend(f"{url}\t{size}\t{marker}" for url, size, marker in source_files(fields["path"]))
    return content_hash([*parts, *extra])


def build_rows(build: BuildRows, items: Sequence[tuple[Any, str]]) -> list[dict[str, Any]]:
    """``build`` over ``(item, origin)`` pairs: each row with its status and origin, a rejected one with its reason
    (``data.bad_rows`` decides when the rows are used)."""
    built = build([item for item, _ in items])
    return [
        {"status": REJECTED, "origin": origin, "reason": str(row)}
        if isinstance(row, DataError)
        else {**row, "status": BUILT, "origin": origin, "reason": ""}
        for row, (_, origin) in zip(built, items, strict=True)
    ]


def cache_folder(cache_dir: str, method: str, key: str, cut: int | None) -> str:
    """The cache entry for rows of ``key`` cut at ``cut`` tokens (None: whole rows)."""
    return os.path.join(cache_dir, CACHE_SUBDIR, f"{method}-{key[:24]}-{cut if cut else 'whole'}")


def find_prepared(cache_dir: str, method: str, key: str, seq_len: int) -> str | None:
    """A complete cache entry of ``key`` whose rows are cut at ``seq_len`` tokens or more, if there is one."""
    root = os.path.join(cache_dir, CACHE_SUBDIR)
    prefix = f"{method}-{key[:24]}-"
    names = sorted(name for name in os.listdir(root) if name.startswith(prefix)) if os.path.isdir(root) else []
    for name in names:
        index = _finished_index(os.path.join(root, name), key)
        if index is not None and (index["seq_len"] is None or index["seq_len"] >= seq_len):
            return os.path.join(root, name)
    return None


def wait_for_prepared(cache_dir: str, method: str, key: str, seq_len: int, *, who: str) -> str:
    """Poll the file system (never a collective, which would time out) until ``who`` has published the entry."""
    log.warning("waiting for %s to prepare the data into %s", who, os.path.join(cache_dir, CACHE_SUBDIR))
    while (folder := find_prepared(cache_dir, method, key, seq_len)) is None:
        time.sleep(POLL_SECONDS)
    return folder


def prepare_rows(
    out_dir: str,
    *,
    method: str,
    key: str,
    settings: Mapping[str, Any],
    sources: Sequence[Mapping[str, Any]],
    read: ReadItems,
    build: BuildRows,
    cut: int | None,
    workers: int | None = None,
    progress: bool = False,
) -> tuple[PreparedRows, bool]:
    """The rows of ``sources`` in ``out_dir``, built there (in ``workers`` processes, resuming the ranges a
    prepare of the same key finished) unless it already holds them; also whether it did (False: read as is)."""
    if _finished_index(out_dir, key) is not None:
        try:
            return PreparedRows(out_dir), False
        except DataError as error:  # a column damaged since: built again from the start
            log.warning("%s; preparing it again", error)
    started = time.perf_counter()
    os.makedirs(out_dir, exist_ok=True)
    if os.path.exists(os.path.join(out_dir, INDEX_FILE)):
        os.remove(os.path.join(out_dir, INDEX_FILE))  # another key's: the folder is incomplete until it is rewritten
    found, skipped = read()
    items = [item for per_source in found for item in per_source]
    ranges = [(start, min(start + RANGE_ROWS, len(items))) for start in range(0, len(items), RANGE_ROWS)]
    todo = [number for number, (start, stop) in enumerate(ranges) if not range_done(out_dir, number, start, stop, key)]
    workers = min(default_workers() if workers is None else workers, len(todo)) or 1
    if todo:
        log.info(
            "preparing %s rows (%d of %d ranges) with %d worker(s) into %s",
            f"{sum(ranges[n][1] - ranges[n][0] for n in todo):,}",
            len(todo),
            len(ranges),
            workers,
            out_dir,
        )
    total = sum(ranges[n][1] - ranges[n][0] for n in todo)
    _JOB.update(folder=out_dir, method=method, key=key, items=items, ranges=ranges, build=build)
    try:
        run_tasks(
            _build_range,
            todo,
            workers=workers,
            progress=WorkProgress(
                total, progress and total > 0, label="tokenizing rows", unit="rows", log_seconds=LOG_SECONDS
            ),
            resume_hint="the ranges it finished are kept: run again to build the rest",
            worker_setup=_one_thread,
            needs_fork=True,
        )
    finally:
        _JOB.clear()
    row_sources = [RowSource(dict(fields), len(per_source)) for fields, per_source in zip(sources, found)]
    index = {
        "format": INDEX_FORMAT,
        "method": method,
        "key": key,
        "seq_len": cut,
        "settings": dict(settings),
        "sources": [asdict(source) for source in row_sources],
        "skipped": asdict(skipped),
    }
    try:
        merge_ranges(out_dir, method, len(ranges), index)
    except FileNotFoundError:
        # another node preparing the same shared cache entry finished first and removed the ranges
        if _finished_index(out_dir, key) is None:
            raise
    seconds = time.perf_counter() - started
    _append_log(out_dir, rows=len(items), built=len(todo), reused=len(ranges) - len(todo), seconds=seconds)
    rows = PreparedRows(out_dir)
    log.info("prepared %s rows in %.1f s into %s", f"{len(rows):,}", seconds, out_dir)
    return rows, True


def default_workers() -> int:
    """One process per core this process may run on, at most 8 (tokenizing is CPU bound)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, 8))


def _finished_index(folder: str, key: str) -> dict[str, Any] | None:
    if not os.path.isfile(os.path.join(folder, INDEX_FILE)):
        return None
    try:
        index = read_index(folder)
    except DataError:
        return None
    return index if index["key"] == key else None


def _append_log(folder: str, **fields: Any) -> None:
    """One line of who prepared what (tests and people read it: ranks that only waited write none)."""
    line = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "rank": int(os.environ.get("RANK", "0")),
        **fields,
    }
    with open(os.path.join(folder, LOG_FILE), "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")


# ---- workers --------------------------------------------------------------------------------------------------

# What the workers build from. Forked workers inherit it (items and the build function are never pickled: the
# function holds the recipe's tokenizer or processor), hence ``needs_fork``: without fork the ranges are built here.
_JOB: dict[str, Any] = {}


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)  # a processor's image ops: one thread per worker process, like the tokenizer


def _build_range(number: int, report: Report) -> None:
    start, stop = _JOB["ranges"][number]
    rows = []
    for at in range(start, stop, PROGRESS_ROWS):
        items = _JOB["items"][at : min(at + PROGRESS_ROWS, stop)]
        rows += build_rows(_JOB["build"], items)
        report(len(items))
    write_range(_JOB["folder"], number, start, rows, _JOB["method"], _JOB["key"])
