"""Bookkeeping off the hot path: metric reductions, file writes and uploads run in background threads, with
OLMo-core's ``run_bookkeeping_op`` signature. A part of ``Trainer``.

Operations that use collectives (``distributed=True``, the default) run one at a time, in order, in a single
thread, on a gloo group of their own (``bookkeeping_pg``) so they never interleave with training's; the others
run concurrently in a pool of threads. With ``async_bookkeeping`` False they run on the training thread instead.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import torch

log = logging.getLogger("honing.train.trainer")

T = TypeVar("T")


class TrainerBookkeeping:
    """Background threads for bookkeeping (the Trainer calls ``_init_bookkeeping`` and sets ``_metrics_group``)."""

    async_bookkeeping: bool
    bookkeeping_soft_timeout: float
    _metrics_group: Any  # the gloo group bookkeeping collectives run on (None in one process)

    def _init_bookkeeping(self, async_bookkeeping: bool | None, soft_timeout: float) -> None:
        # None is True: honing makes a gloo group for bookkeeping beside any training backend (OLMo-core's
        # default is True whenever such a CPU backend is available)
        self.async_bookkeeping = True if async_bookkeeping is None else bool(async_bookkeeping)
        self.bookkeeping_soft_timeout = soft_timeout
        self._single_thread_pool: ThreadPoolExecutor | None = None
        self._multi_thread_pool: ThreadPoolExecutor | None = None
        self._bookkeeping_futures: list[Future] = []
        self._bookkeeping_by_name: dict[str, list[Future]] = {}

    @property
    def bookkeeping_pg(self) -> Any:
        """The process group bookkeeping collectives run on (metric reductions): a gloo group of every rank,
        apart from training's; None in one process."""
        return self._metrics_group

    @property
    def bookkeeping_device(self) -> torch.device:
        """The device bookkeeping collectives reduce on: the CPU (``bookkeeping_pg`` is a gloo group)."""
        return torch.device("cpu")

    @property
    def single_thread_pool(self) -> ThreadPoolExecutor:
        """The one thread that runs bookkeeping operations using collectives, in the order they were asked."""
        if self._single_thread_pool is None:
            self._single_thread_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="honing-bookkeeping")
        return self._single_thread_pool

    @property
    def multi_thread_pool(self) -> ThreadPoolExecutor:
        """The threads that run bookkeeping operations without collectives, concurrently."""
        if self._multi_thread_pool is None:
            self._multi_thread_pool = ThreadPoolExecutor(thread_name_prefix="honing-bookkeeping-io")
        return self._multi_thread_pool

    def run_bookkeeping_op(
        self,
        op: Callable[..., T],
        *args: Any,
        cb: Callable[[T], None] | None = None,
        op_name: str | None = None,
        cancel_in_progress: bool | None = None,
        allow_multiple: bool = True,
        soft_timeout: float | None = None,
        distributed: bool = True,
        **kwargs: Any,
    ) -> Future:
        """Run ``op(*args, **kwargs)`` off the training thread and return its future, as OLMo-core's: ``cb`` is
        called with its result when it finishes; with ``allow_multiple`` False, queued calls of the same
        ``op_name`` are dropped and, if one is running, this call is not made (its future is returned);
        a call longer than ``soft_timeout`` seconds (default ``bookkeeping_soft_timeout``) is warned about;
        ``distributed`` False lets ``op`` (which then must use no collective) run beside other operations."""
        if cancel_in_progress is not None:
            warnings.warn(
                "run_bookkeeping_op(cancel_in_progress=...) is deprecated (as in OLMo-core): use allow_multiple",
                DeprecationWarning,
                stacklevel=2,
            )
            allow_multiple = not cancel_in_progress
        name = op_name or getattr(op, "__qualname__", repr(op))
        limit = self.bookkeeping_soft_timeout if soft_timeout is None else soft_timeout

        def run() -> T:
            start = time.perf_counter()
            try:
                result = op(*args, **kwargs)
                if cb is not None:
                    cb(result)
                return result
            finally:
                if (seconds := time.perf_counter() - start) > limit:
                    log.warning("bookkeeping op %r took %.0f s (more than %g s)", name, seconds, limit)

        if not allow_multiple:
            running = self._drop_queued(name)
            if running is not None:
                log.warning(
                    "bookkeeping op %r is still running, so this call of it is skipped (allow_multiple=False)", name
                )
                return running
        if distributed and not self.async_bookkeeping:
            done: Future = Future()
            done.set_result(run())
            return done
        future = (self.single_thread_pool if distributed else self.multi_thread_pool).submit(run)
        self._bookkeeping_futures = [f for f in self._bookkeeping_futures if not f.done()] + [future]
        same_name = [f for f in self._bookkeeping_by_name.get(name, []) if not f.done()]
        self._bookkeeping_by_name[name] = same_name + [future]
        return future

    def _drop_queued(self, name: str) -> Future | None:
        """Cancel the queued calls of ``name``; return the one running, if any."""
        running = None
        for future in self._bookkeeping_by_name.pop(name, []):
            if not (future.cancel() or future.done()):
                running = future
        if running is not None:
            self._bookkeeping_by_name[name] = [running]
        return running

    def wait_for_bookkeeping(self) -> None:
        """Block until every bookkeeping op has finished, re-raising the first error."""
        for future in self._bookkeeping_futures:
            if not future.cancelled():
                future.result()
        self._bookkeeping_futures.clear()
        self._bookkeeping_by_name.clear()

    def _shutdown_bookkeeping(self, *, wait: bool, cancel_futures: bool = False) -> None:
        """Stop the bookkeeping threads (a later op starts new ones)."""
        for pool in (self._single_thread_pool, self._multi_thread_pool):
            if pool is not None:
                pool.shutdown(wait=wait, cancel_futures=cancel_futures)
        self._single_thread_pool = self._multi_thread_pool = None
