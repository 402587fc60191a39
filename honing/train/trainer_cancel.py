"""Stopping a run cleanly: a rank asks (a signal handler, a callback), and every rank agrees without a blocking
collective at each step, then stops after the same step. The Trainer's ``cancellation``."""

from __future__ import annotations

import logging

import torch
import torch.distributed as dist

from honing.distributed import get_world_size, new_background_group
from honing.train.trainer_progress import Progress

log = logging.getLogger("honing.train.trainer")


class Cancellation:
    """Cancel requests exchanged between ranks by an asynchronous all-reduce on a group of their own, checked every
    ``check_interval`` steps (the trainer section's ``cancel_check_interval``)."""

    def __init__(self, check_interval: int, progress: Progress):
        self.check_interval = check_interval
        self._progress = progress  # read for the step a cancel is logged at
        self.canceled = False
        self.reason: str | None = None
        self.requested: str | None = None  # this rank's request, not yet agreed on
        self.signaled = False  # the request came from SIGTERM / SIGINT: the process is asked to end soon
        # Cancel flags are exchanged every step by an asynchronous all-reduce on a gloo group of their own (not
        # the bookkeeping group: its thread's collectives there would interleave with it differently on each
        # rank); a step's exchange is waited on at the next step's boundary, long done by then.
        self.group: dist.ProcessGroup | None = new_background_group() if get_world_size() > 1 else None
        self._exchange: tuple[dist.Work, torch.Tensor] | None = None

    def request(self, reason: str, no_sync: bool = False) -> None:
        """Ask the run to stop gracefully at the next cancel check (safe from signal handlers); with ``no_sync``
        (only when every rank calls it at the same step, as in OLMo-core) it stops after this step at once."""
        self.requested = reason
        if no_sync:
            self._mark_canceled(reason)

    def request_on_signal(self, reason: str) -> None:
        """:meth:`request`, from a signal handler: evaluations in progress may also stop (:meth:`stop_evaluating`)."""
        self.signaled = True
        self.request(reason)

    def stop_evaluating(self) -> bool:
        """Whether an evaluation should stop where it is, its metrics not recorded: a signal asked this process, or
        any rank, to end (a scheduler's SIGTERM, one Ctrl-C). With several ranks every rank calls this at the same
        point of the evaluation (each batch; ranks evaluate in step) and all get the same answer, from a blocking
        all-reduce on this group: a forward is far longer than it, and the ranks then stop at the same batch."""
        if self.group is None:
            return self.signaled
        flag = torch.tensor([int(self.signaled)], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group)
        return bool(flag.item())

    def check(self) -> None:
        """Agree across ranks, without blocking, whether any rank asked to cancel: this rank's flag is sent in
        an asynchronous all-reduce whose result is read at the next check, so a request made during step N is
        acted on by every rank after step N + 1 at the latest (one process: after step N)."""
        if self.group is None:
            if self.requested is not None:
                self._mark_canceled(self.requested)
            return
        requested = self.finish_exchange()
        flag = torch.tensor([0 if self.requested is None else 1], dtype=torch.int32)
        work = dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group, async_op=True)
        self._exchange = (work, flag)
        if requested:
            self._mark_canceled(self.requested or "another rank canceled the run")

    def finish_exchange(self) -> bool:
        """Wait for the exchange in flight (every rank started it at the same step) and return its answer."""
        if self._exchange is None:
            return False
        work, flag = self._exchange
        self._exchange = None
        work.wait()
        return bool(flag.item())

    def _mark_canceled(self, reason: str) -> None:
        if not self.canceled:
            self.canceled = True
            self.reason = reason
            log.warning("canceling the run at step %d: %s", self._progress.global_step, reason)
