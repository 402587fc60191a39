"""Bookkeeping off the hot path: metric reductions, file writes and uploads run in background threads, with
OLMo-core's ``run_bookkeeping_op`` signature: the Trainer's ``bookkeeping``.

Operations that use collectives (``distributed=True``, the default) run one at a time, in order, in a single
thread, on a gloo group of their own (``group``, the Trainer's ``bookkeeping_pg``) so they never interleave with
training's; the others run concurrently in a pool of threads. With ``async_bookkeeping`` False they run on the
training thread instead.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import torch
import torch.distributed as dist

from honing.distributed import get_world_size, new_background_group

log = logging.getLogger("honing.train.trainer")

T = TypeVar("T")


class Bookkeeping:
    """The Trainer's background threads for bookkeeping and the gloo group their collectives run on."""

    def __init__(self, *, async_bookkeeping: bool | None = None, soft_timeout: float = 30):
        # None is True: honing makes a gloo group for bookkeeping beside any training backend (OLMo-core's
        # default is True whenever such a CPU backend is available)
        self.async_bookkeeping = True if async_bookkeeping is None else bool(async_bookkeeping)
        self.soft_timeout = soft_timeout
        # Metrics are reduced across ranks in the bookkeeping thread, on a gloo group of their own so those
        # collectives never interleave with training's; created here, where every rank reaches it.
        self.group: dist.ProcessGroup | None = new_background_group() if get_world_size() > 1 else None
        self._single_thread_pool: ThreadPoolExecutor | None = None
        self._multi_thread_pool: ThreadPoolExecutor | None = None
        self._futures: list[Future] = []
        self._futures_by_name: dict[str, list[Future]] = {}

    @property
    def device(self) -> torch.device:
        """The device bookkeeping collectives reduce on: the CPU (``group`` is a gloo group)."""
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

    def run(
        self,
        op: Callable[..., T],
        *args: object,
        cb: Callable[[T], None] | None = None,
        op_name: str | None = None,
        cancel_in_progress: bool | None = None,
        allow_multiple: bool = True,
        soft_timeout: float | None = None,
        distributed: bool = True,
        **kwargs: object,
    ) -> Future:
        """Run ``op(*args, **kwargs)`` off the training thread and return its future, as OLMo-core's: ``cb`` is
        called with its result when it finishes; with ``allow_multiple`` False, queued calls of the same
        ``op_name`` are dropped and, if one is running, this call is not made (its future is returned);
        a call longer than ``soft_timeout`` seconds (default: this object's) is warned about;
        ``distributed`` False lets ``op`` (which then must use no collective) run beside other operations."""
        if cancel_in_progress is not None:
            warnings.warn(
                "run_bookkeeping_op(cancel_in_progress=...) is deprecated (as in OLMo-core): use allow_multiple",
                DeprecationWarning,
                stacklevel=2,
            )
            allow_multiple = not cancel_in_progress
        name = op_name or getattr(op, "__qualname__", repr(op))
        limit = self.soft_timeout if soft_timeout is None else soft_timeout

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
        self._futures = [f for f in self._futures if not f.done()] + [future]
        same_name = [f for f in self._futures_by_name.get(name, []) if not f.done()]
        self._futures_by_name[name] = same_name + [future]
        return future

    def _drop_queued(self, name: str) -> Future | None:
        """Cancel the queued calls of ``name``; return the one running, if any."""
        running = None
        for future in self._futures_by_name.pop(name, []):
            if not (future.cancel() or future.done()):
                running = future
        if running is not None:
            self._futures_by_name[name] = [running]
        return running

    def wait(self) -> None:
        """Block until every bookkeeping op has finished, re-raising the first error."""
        for future in self._futures:
            if not future.cancelled():
                future.result()
        self._futures.clear()
        self._futures_by_name.clear()

    def shutdown(self, *, wait: bool, cancel_futures: bool = False) -> None:
        """Stop the bookkeeping threads (a later op starts new ones)."""
        for pool in (self._single_thread_pool, self._multi_thread_pool):
            if pool is not None:
                pool.shutdown(wait=wait, cancel_futures=cancel_futures)
        self._single_thread_pool = self._multi_thread_pool = None
