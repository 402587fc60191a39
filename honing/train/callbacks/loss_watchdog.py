"""Stop a run whose loss stays above a threshold for a number of consecutive steps (axolotl's loss watchdog)."""

from __future__ import annotations

import logging
import math
from typing import Any

from honing.distributed import is_rank0
from honing.train.callbacks.base import Callback

log = logging.getLogger(__name__)


class LossWatchdogCallback(Callback):
    """Counts the consecutive steps whose ``train/loss`` is above ``threshold`` and, once ``patience`` of them are
    seen, cancels the run: it ends as a run that reached its duration does (final checkpoint and exports), as
    axolotl's ``LossWatchDogCallback`` sets ``should_training_stop``. The losses are those every rank logs (reduced
    across ranks), read as they are collected, so the hot path gains no host sync and every rank decides alike;
    the run stops at the next cancel check after the step that decided it."""

    def __init__(self, *, threshold: float, patience: int = 3):
        if patience < 1 or not math.isfinite(threshold):
            raise ValueError(f"patience must be >= 1 and threshold finite, got {patience} and {threshold}")
        self.threshold = threshold
        self.patience = patience
        self.violations = 0  # consecutive logged steps above the threshold
        self.tripped = False

    def on_log(self, step: int, metrics: dict[str, float]) -> None:
        loss = metrics.get("train/loss")
        if loss is None or self.tripped:
            return
        # a NaN compares false: the nonfinite-loss policy (trainer.nonfinite_loss) answers for it, not this count
        self.violations = self.violations + 1 if loss > self.threshold else 0
        if self.violations >= self.patience:
            self.tripped = True
            reason = (
                f"train/loss was above callbacks.loss_watchdog.threshold ({self.threshold:g}) for {self.violations} "
                f"consecutive steps (patience {self.patience}), last {loss:.4g} at step {step}"
            )
            if is_rank0():
                log.warning("loss watchdog: %s; stopping the run", reason)
            self.trainer.cancel_run(f"loss watchdog: {reason}")

    def state_dict(self) -> dict[str, Any]:
        return {"violations": self.violations}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.violations = int(state_dict.get("violations", 0))
