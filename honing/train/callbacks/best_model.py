"""Track the best checkpoint by a validation metric, keep it past ``keep_last``, export it at the end."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from typing import Any

from honing.distributed import barrier
from honing.train.callbacks.base import Callback
from honing.train.callbacks.checkpointer import CheckpointerCallback
from honing.train.callbacks.order import PRIORITY

log = logging.getLogger(__name__)


def lower_is_better(metric: str) -> bool:
    """Losses and perplexities improve downwards; accuracies and the like upwards."""
    return any(part in metric.lower() for part in ("loss", "perplexity"))


class BestModelCallback(Callback):
    """Watches ``metric`` (recorded by the evaluator at this step); a new best step gets a checkpoint
    (saved now when the checkpointer would not save this step) that ``keep_last`` never deletes.

    At the end the best checkpoint is written by ``export_fn(checkpoint_dir, out_dir)`` to
    ``SAVE_FOLDER/best`` (e.g. merged, when training LoRA adapters).
    """

    priority = PRIORITY["best_model"]

    def __init__(
        self,
        checkpointer: CheckpointerCallback,
        *,
        metric: str,
        greater_is_better: bool | None = None,
        export_fn: Callable[[str, str], Any] | None = None,
        folder_name: str = "best",
    ):
        self.checkpointer = checkpointer
        self.metric = metric
        self.greater_is_better = (not lower_is_better(metric)) if greater_is_better is None else greater_is_better
        self.export_fn = export_fn
        self.folder_name = folder_name
        self.best_step: int | None = None
        self.best_value: float | None = None
        self._stale_best: int | None = None

    def is_better(self, value: float) -> bool:
        """True when ``value`` beats the best so far (NaN never does)."""
        if math.isnan(value):
            return False
        if self.best_value is None:
            return True
        return value > self.best_value if self.greater_is_better else value < self.best_value

    def on_step_end(self) -> None:
        self._check(final=False)

    def on_train_end(self) -> None:
        self._check(final=True)

    def _check(self, *, final: bool) -> None:
        value = self.trainer.get_metric(self.metric, self.step)
        if value is None:
            return
        value = float(value)
        if not self.is_better(value):
            return
        previous = self.best_step
        self.best_step, self.best_value = self.step, value
        self.checkpointer.protected_steps.add(self.step)
        if previous is not None and previous != self.step:
            self.checkpointer.release(previous)
        log.info("new best %s = %.4f at step %d", self.metric, value, self.step)
        # The checkpointer saves on its own at its interval and when training ends.
        if not final and not self.checkpointer.saves_at(self.step):
            self.checkpointer.save_extra()

    @property
    def best_checkpoint(self) -> str | None:
        """The best step's checkpoint folder, once it is known."""
        return None if self.best_step is None else self.trainer.checkpoint_dir(self.best_step)

    def export_best(self, folder_name: str | None = None) -> str | None:
        """Write the best checkpoint with ``export_fn`` to ``SAVE_FOLDER/best`` (or ``folder_name``; every rank
        calls it); None when there is no best checkpoint to export."""
        if self.export_fn is None or self.best_step is None:
            return None
        if getattr(self.trainer, "no_checkpoints", False):
            log.warning("no_checkpoints is set: the best model (step %d) has no checkpoint to export", self.best_step)
            return None
        self.trainer.checkpointer.wait()
        local = os.path.join(self.trainer.work_folder, folder_name or self.folder_name)
        # the checkpoint as written locally (for a remote save folder, in its work folder)
        self.export_fn(self.trainer.checkpointer.work_folder(self.best_checkpoint), local)
        barrier()
        out = self.trainer.persist_working_file(local)
        log.info(
            "exported the best model (%s = %.4f, step %d) to %s", self.metric, self.best_value, self.best_step, out
        )
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "best_step": self.best_step,
            "best_value": self.best_value,
            "metric": self.metric,
            "greater_is_better": self.greater_is_better,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # A best value of another metric (or direction) says nothing about this run's: a resumed run with a
        # changed callbacks.best_model.metric tracks its best anew, and the old best checkpoint is no longer kept.
        saved = (state_dict.get("metric", self.metric), state_dict.get("greater_is_better", self.greater_is_better))
        if saved != (self.metric, self.greater_is_better):
            old_step = state_dict.get("best_step")
            self._stale_best = old_step  # released once every callback's state is back (the checkpointer's too)
            log.warning(
                "the best model was tracked by %s (%s is better) and is now tracked by %s (%s is better): the best "
                "so far (step %s) no longer counts",
                saved[0],
                "higher" if saved[1] else "lower",
                self.metric,
                "higher" if self.greater_is_better else "lower",
                old_step,
            )
            return
        self.best_step = state_dict.get("best_step")
        self.best_value = state_dict.get("best_value")

    def post_checkpoint_loaded(self, path: str) -> None:
        if self._stale_best is not None:
            self.checkpointer.release(self._stale_best)
            self._stale_best = None


class BestModelExportCallback(Callback):
    """Runs the best model's export after the final checkpoint is written (the checkpointer is at -50)."""

    priority = PRIORITY["best_model_export"]

    def __init__(self, best: BestModelCallback):
        self.best = best

    def on_train_end(self) -> None:
        self.best.export_best()
