"""The worker processes of ``honing prepare``: run each piece of work (a token shard, a range of rows) in a pool of
processes, or in this one where one process is enough, with one progress bar counting what the workers report.

A worker's error is raised here as it was raised there (its message names the file or row); a worker that dies
(killed, out of memory) is a ``DataError`` saying what was kept. Either way the pieces not yet started are cancelled,
the running ones finish, and the pool is shut down before the error leaves, so pieces already written stay whole.
Which pieces are left to do (resuming) is the caller's: each kind knows what a finished piece looks like.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any, TypeVar

from honing.data.progress import WorkProgress
from honing.errors import DataError

#: how long the progress drain may take to see the end after the workers are gone
DRAIN_SECONDS = 10.0

Task = TypeVar("Task")
#: counts units of work done (bytes read, rows built) toward the progress bar
Report = Callable[[int], None]


def run_tasks(
    work: Callable[[Task, Report], object],
    tasks: Sequence[Task],
    *,
    workers: int,
    progress: WorkProgress,
    resume_hint: str,
    setup: Callable[[], None] | None = None,
    worker_setup: Callable[[], None] | None = None,
    needs_fork: bool = False,
) -> None:
    """Call ``work(task, report)`` for every task, in ``min(workers, len(tasks))`` processes (in this one for one).

    ``progress`` is entered here and advanced by ``report``. ``setup`` makes what ``work`` reads, once in every
    process that runs tasks (each worker, or this one); ``worker_setup`` runs in worker processes only (limits this
    process must keep). ``needs_fork``: the tasks read what this process holds, which a forked worker inherits and
    a spawned one would not have, so without fork they run here. ``resume_hint`` ends the error of a dead worker.
    """
    if not tasks:
        return
    start_methods = multiprocessing.get_all_start_methods()
    processes = min(workers, len(tasks))
    if processes == 1 or (needs_fork and "fork" not in start_methods):
        if setup is not None:
            setup()
        with progress:
            for task in tasks:
                work(task, progress.advance)
        return
    # fork where there is one: a spawned worker would spend seconds importing honing (and torch) again. The
    # workers are forked (at the first submit) before the progress bar or the drain thread start a thread.
    context = multiprocessing.get_context("fork" if "fork" in start_methods else "spawn")
    queue = context.Queue()
    # An executor, not a multiprocessing.Pool: a worker killed (out of memory, kill -9) breaks it with an error
    # instead of leaving the parent waiting forever.
    with ProcessPoolExecutor(
        processes, mp_context=context, initializer=_start_worker, initargs=(queue, setup, worker_setup)
    ) as pool:
        with _tokenizers_single_threaded():
            futures = [pool.submit(_run_task, work, task) for task in tasks]
        with progress:
            drain = threading.Thread(target=_drain, args=(queue, progress.advance), daemon=True)
            drain.start()
            try:
                _wait_for(futures, resume_hint)
            finally:
                for future in futures:
                    future.cancel()
                pool.shutdown(wait=True)  # the running pieces finish (and report) before the drain stops
                queue.put(None)
                drain.join(timeout=DRAIN_SECONDS)
                if drain.is_alive():  # a worker killed while writing to the queue holds its lock: no end comes
                    queue.cancel_join_thread()  # the daemon drain and the queue's feeder are left, not waited for


@contextmanager
def _tokenizers_single_threaded() -> Iterator[None]:
    """One process per worker: the Rust tokenizer's own thread pool would only oversubscribe the cores (and warn in
    every forked worker). Set while the workers start, restored after."""
    saved = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = saved


def _wait_for(futures: list[Future], resume_hint: str) -> None:
    """Every future's result, raising the first error a task raised."""
    try:
        for future in as_completed(futures):
            future.result()
    except BrokenProcessPool as error:
        raise DataError(f"a prepare worker died (killed, or out of memory); {resume_hint}") from error


def _drain(queue: Any, advance: Report) -> None:
    while (done := queue.get()) is not None:
        advance(done)


# ---- worker side --------------------------------------------------------------------------------------------

_worker: dict[str, Any] = {}


def _start_worker(queue: Any, setup: Callable[[], None] | None, worker_setup: Callable[[], None] | None) -> None:
    _worker["queue"] = queue
    for step in (worker_setup, setup):
        if step is not None:
            step()


def _run_task(work: Callable[[Task, Report], object], task: Task) -> None:
    work(task, _worker["queue"].put)
