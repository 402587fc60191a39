"""Stopping a run cleanly: a rank asks (a signal handler, a callback), and every rank agrees without a blocking
collective at each step, then stops after the same step. A part of ``Trainer``."""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.distributed as dist

log = logging.getLogger("honing.train.trainer")


class TrainerCancel:
    """Cancel requests exchanged between ranks by an asynchronous all-reduce on a group of their own."""

    global_step: int
    canceled: bool
    cancel_reason: str | None
    _cancel_requested: str | None
    _cancel_group: Any
    _cancel_exchange: tuple[Any, torch.Tensor] | None

    def cancel_run(self, reason: str, no_sync: bool = False) -> None:
        """Ask the run to stop gracefully at the next cancel check (safe from signal handlers); with ``no_sync``
        (only when every rank calls it at the same step, as in OLMo-core) it stops after this step at once."""
        self._cancel_requested = reason
        if no_sync:
            self._mark_canceled(reason)

    @property
    def is_canceled(self) -> bool:
        """Whether the run was canceled (OLMo-core's name for ``canceled``)."""
        return self.canceled

    def check_if_canceled(self) -> None:
        """Agree across ranks, without blocking, whether any rank asked to cancel: this rank's flag is sent in
        an asynchronous all-reduce whose result is read at the next check, so a request made during step N is
        acted on by every rank after step N + 1 at the latest (one process: after step N)."""
        if self._cancel_group is None:
            if self._cancel_requested is not None:
                self._mark_canceled(self._cancel_requested)
            return
        requested = self._finish_cancel_exchange()
        flag = torch.tensor([0 if self._cancel_requested is None else 1], dtype=torch.int32)
        work = dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._cancel_group, async_op=True)
        self._cancel_exchange = (work, flag)
        if requested:
            self._mark_canceled(self._cancel_requested or "another rank canceled the run")

    def _finish_cancel_exchange(self) -> bool:
        """Wait for the exchange in flight (every rank started it at the same step) and return its answer."""
        if self._cancel_exchange is None:
            return False
        work, flag = self._cancel_exchange
        self._cancel_exchange = None
        work.wait()
        return bool(flag.item())

    def _mark_canceled(self, reason: str) -> None:
        if not self.canceled:
            self.canceled = True
            self.cancel_reason = reason
            log.warning("canceling the run at step %d: %s", self.global_step, reason)
