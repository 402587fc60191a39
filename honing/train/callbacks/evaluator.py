"""Validation loss every ``interval`` steps and at the end of training."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from honing.train.callbacks.base import Callback
from honing.train.callbacks.order import PRIORITY
from honing.train.metrics import ReduceType


class EvaluatorCallback(Callback):
    """Runs ``train_module.eval_batch`` over the validation batches and records ``eval/*``.

    ``eval_batch`` returns sums (e.g. ``loss_sum`` and ``tokens``), added over batches and ranks exactly;
    the train module's ``eval_metrics`` turns the totals into metrics (e.g. the mean loss per token).
    """

    priority = PRIORITY["evaluator"]

    def __init__(
        self, *, batches: Iterable[dict[str, Any]], interval: int, max_batches: int | None = None, name: str = "eval"
    ):
        self.batches = batches
        self.interval = interval
        self.max_batches = max_batches
        self.name = name
        self.last_eval_step: int | None = None

    def on_step_end(self) -> None:
        # the last step is evaluated here, not at train end, so its metrics are logged with the step's
        if self.step % self.interval == 0 or self.trainer.is_last_step:
            self.evaluate()

    def on_train_end(self) -> None:  # a canceled run
        if self.last_eval_step != self.step:
            self.evaluate()

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Evaluate now and record the metrics for the current step."""
        module = self.trainer.train_module
        was_training = module.model.training
        totals: dict[str, torch.Tensor] = {}
        try:
            for index, batch in enumerate(self.batches):
                if self.max_batches is not None and index >= self.max_batches:
                    break
                for key, value in module.eval_batch(batch).items():
                    totals[key] = totals.get(key, 0) + value.detach().double()
        finally:
            module.model.train(was_training)
        if not totals:
            return {}
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            stacked = torch.stack([totals[k].cpu() for k in sorted(totals)])
            torch.distributed.all_reduce(stacked)
            totals = dict(zip(sorted(totals), stacked))
        # the train module knows what its totals mean (a loss per token, a reward accuracy per pair ...)
        metrics = module.eval_metrics({key: float(value) for key, value in totals.items()})
        results = {f"{self.name}/{key}": value for key, value in metrics.items()}
        for key, value in results.items():
            # already reduced above, so every rank holds the same value
            self.trainer.record_metric(key, value, ReduceType.max)
        self.last_eval_step = self.step
        return results
