"""lm-evaluation-harness benchmarks during training: every ``interval`` steps and at the end, on rank 0, while
the other ranks wait without a collective that could time out."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from honing.distributed import is_distributed, is_rank0
from honing.train.callbacks.base import Callback
from honing.train.callbacks.order import PRIORITY

log = logging.getLogger(__name__)

#: how often a waiting rank asks the store whether rank 0 has finished
POLL_SECONDS = 0.2


class HarnessEvalCallback(Callback):
    """Runs ``evaluate_fn(step)`` at the chosen steps and records what it returns (``eval/harness/<task>/<metric>``
    → value) on rank 0, where it is logged as rank 0's own value.

    ``evaluate_fn`` runs on every rank (a sharded model's weights are gathered by all of them) and returns the
    metrics on rank 0, None elsewhere. An evaluation can take longer than the process group's timeout, so the other
    ranks do not wait in a barrier: they poll the process group's key-value store, which rank 0 marks when it is
    done (or failed, so that every rank stops with it).
    """

    priority = PRIORITY["harness_eval"]

    def __init__(
        self,
        evaluate_fn: Callable[[int], dict[str, float] | None],
        *,
        interval: int | None = None,
        printer: Callable[[str], Any] = print,
    ):
        self.evaluate_fn = evaluate_fn
        self.interval = interval
        self.printer = printer
        self.evaluated_steps: list[int] = []

    def on_step_end(self) -> None:
        if self.trainer.is_last_step or (self.interval and self.step % self.interval == 0):
            self.evaluate()

    def on_train_end(self) -> None:  # a canceled run ends between the chosen steps
        if not self.evaluated_steps or self.evaluated_steps[-1] != self.step:
            self.evaluate()

    def evaluate(self) -> None:
        """Evaluate the current weights now; every rank returns once rank 0 has the results."""
        step = self.step
        started = time.perf_counter()
        error: BaseException | None = None
        metrics = None
        try:
            metrics = self.evaluate_fn(step)
        except BaseException as failure:  # the waiting ranks must hear of it, then it propagates
            error = failure
        self._meet(step, failed=error is not None)
        if error is not None:
            raise error
        self.evaluated_steps.append(step)
        if is_rank0() and metrics is not None:
            for name, value in metrics.items():
                self.trainer.record_metric(name, value, None)
            shown = ", ".join(f"{name.removeprefix('eval/harness/')} {value:.4f}" for name, value in metrics.items())
            self.printer(f"lm-eval at step {step} ({time.perf_counter() - started:.1f} s): {shown}")

    def _meet(self, step: int, *, failed: bool) -> None:
        """Rank 0 marks the store; the others poll it (a store read has its own timeout, a poll loop has none)."""
        if not is_distributed():
            return
        store = dist.distributed_c10d._get_default_store()
        key = f"honing/harness_eval/{step}/{len(self.evaluated_steps)}"
        if is_rank0():
            store.set(key, "failed" if failed else "done")
            return
        while not store.check([key]):
            time.sleep(POLL_SECONDS)
        if store.get(key) == b"failed" and not failed:
            raise RuntimeError(f"callbacks.harness_eval failed on rank 0 at step {step}; see its error")
