"""Validation loss every ``interval`` steps (or at each epoch's end) and at the end of training."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch

from honing.train.callbacks.base import Callback
from honing.train.callbacks.order import PRIORITY
from honing.train.metrics import ReduceType

if TYPE_CHECKING:
    from honing.train.train_module import TrainModule

log = logging.getLogger(__name__)


def evaluation_cut(trainer: Any, what: str, done: int, unit: str = "batches") -> bool:
    """Whether ``what`` (an evaluation, ``done`` of its batches or prompts in) stops now because a signal asked the
    run to end (``Trainer.stop_evaluating``); says so when it does."""
    stop = getattr(trainer, "stop_evaluating", None)
    if stop is None or not stop():
        return False
    reason = trainer.cancellation.requested or "another rank received a signal"
    if done:
        log.warning("stopping %s after %d of its %s (%s): its metrics are not recorded", what, done, unit, reason)
    else:
        log.warning("skipping %s (%s)", what, reason)
    return True


class EvaluatorCallback(Callback):
    """Runs ``train_module.eval_batch`` over the validation batches and records ``eval/*``.

    ``eval_batch`` returns sums (e.g. ``loss_sum`` and ``tokens``), added over batches and ranks exactly;
    the train module's ``eval_metrics`` turns the totals into metrics (e.g. the mean loss per token).
    """

    priority = PRIORITY["evaluator"]

    def __init__(
        self,
        *,
        batches: Iterable[dict[str, Any]],
        interval: int,
        max_batches: int | None = None,
        name: str = "eval",
        interval_fraction: float | None = None,
        every_epoch: bool = False,
    ):
        self.batches = batches
        self.interval = interval
        self.interval_fraction = interval_fraction
        self.every_epoch = every_epoch
        self.max_batches = max_batches
        self.name = name
        self.last_eval_step: int | None = None

    def on_train_begin(self) -> None:
        if self.interval_fraction is None:
            return
        total = self.trainer.max_steps
        if total is None:  # a duration in tokens whose batches vary: no step count to take a share of
            log.warning("callbacks.evaluator.interval_fraction: the run's steps are not known; evaluating every "
                        "%d steps (callbacks.evaluator.interval)", self.interval)  # fmt: skip
            return
        # transformers' TrainerState.compute_steps: ceil(ratio x max_steps)
        self.interval = max(1, math.ceil(self.interval_fraction * total))

    def on_step_end(self) -> None:
        # the last step is evaluated here, not at train end, so its metrics are logged with the step's
        if self.trainer.is_last_step or (
            self._epoch_last_step() if self.every_epoch else self.step % self.interval == 0
        ):
            self.evaluate()

    def on_epoch_end(self) -> None:
        # a loader that cannot tell its batches per epoch ahead: the epoch's end is known only once it is over
        if self.every_epoch and self.step and self.last_eval_step != self.step:
            self.evaluate()

    def _epoch_last_step(self) -> bool:
        steps_per_epoch = self.trainer.progress.steps_per_epoch
        return bool(steps_per_epoch) and self.step % steps_per_epoch == 0

    def on_train_end(self) -> None:  # a canceled run
        if self.last_eval_step != self.step:
            self.evaluate()

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Evaluate now and record the metrics for the current step: ``eval/*`` over all validation rows and,
        when the batches are several sources' (``parts``), ``eval/<source name>/*`` for each."""
        module = self.trainer.train_module
        was_training = module.model.training
        parts = getattr(self.batches, "parts", None) or {None: self.batches}
        totals: dict[Any, dict[str, torch.Tensor]] = {}
        try:
            for name, batches in parts.items():
                part = self._totals(module, batches)
                if part is None:  # a signal asked the run to end: stop here, record nothing
                    self.last_eval_step = self.step
                    return {}
                totals[name] = part
        finally:
            module.model.train(was_training)
        keys = sorted({key for part in totals.values() for key in part})
        if not keys:
            return {}
        # one tensor for every source's sums: a single collective however many sources there are
        stacked = torch.tensor(
            [[float(totals[name].get(key, 0.0)) for key in keys] for name in totals], dtype=torch.float64
        )
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(stacked)
        # the sums add over sources: the whole split's metrics are those of the summed totals
        results = self._metrics(module, self.name, dict(zip(keys, stacked.sum(dim=0).tolist())))
        if None not in totals:
            for row, name in zip(stacked, totals):
                results.update(self._metrics(module, f"{self.name}/{name}", dict(zip(keys, row.tolist()))))
        for key, value in results.items():
            # already reduced above, so every rank holds the same value
            self.trainer.record_metric(key, value, ReduceType.max)
        self.last_eval_step = self.step
        return results

    def _totals(self, module: TrainModule, batches: Iterable[dict[str, Any]]) -> dict[str, torch.Tensor] | None:
        """The summed ``eval_batch`` results, or None when the run was told to end before they were all in."""
        totals: dict[str, torch.Tensor] = {}
        for index, batch in enumerate(batches):
            if self.max_batches is not None and index >= self.max_batches:
                break
            if evaluation_cut(self.trainer, f"the evaluation at step {self.step}", index):
                return None
            for key, value in module.eval_batch(batch).items():
                totals[key] = totals.get(key, 0) + value.detach().double()
        return totals

    @staticmethod
    def _metrics(module: TrainModule, prefix: str, totals: dict[str, float]) -> dict[str, float]:
        # the train module knows what its totals mean (a loss per token, a reward accuracy per pair ...)
        return {f"{prefix}/{key}": value for key, value in module.eval_metrics(totals).items()}
