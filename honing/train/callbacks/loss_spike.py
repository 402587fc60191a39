"""Record how far each step's loss jumps from its running statistics, and how many losses were not finite."""

from __future__ import annotations

import logging
import math
from typing import Any

import torch

from honing.distributed import is_rank0
from honing.train.callbacks.base import Callback
from honing.train.callbacks.order import PRIORITY

log = logging.getLogger(__name__)

SPIKE_SCORE = "train/loss_spike_score"
NONFINITE_COUNT = "train/nonfinite_count"


class LossSpikeCallback(Callback):
    """Logs ``train/loss_spike_score``, the step's loss as a z-score against an exponential moving mean and
    variance of the finite losses before it (0 during the first ``warmup_steps``), and ``train/nonfinite_count``,
    the NaN or infinite losses so far (the steps a skip policy for them skipped). Both are computed on the
    loss's device, so the hot path gains no host sync; a score above ``warn_score`` is warned about once per spike.
    """

    priority = PRIORITY["loss_spike"]

    def __init__(self, *, window: int = 100, warmup_steps: int = 10, warn_score: float | None = 6.0):
        if window < 1 or warmup_steps < 0:
            raise ValueError(f"window must be >= 1 and warmup_steps >= 0, got {window} and {warmup_steps}")
        self.alpha = 2.0 / (window + 1)  # the usual span-to-decay rule of exponential moving averages
        self.warmup_steps = warmup_steps
        self.warn_score = warn_score
        self._seen = 0  # steps with a recorded loss (a host count: no sync)
        self._mean: torch.Tensor | None = None
        self._var: torch.Tensor | None = None
        self._nonfinite: torch.Tensor | None = None
        self._spiking = False
        self._restored: dict[str, float] | None = None  # a checkpoint's state, put on the device at the next step

    def on_step_end(self) -> None:
        loss = self.trainer.get_metric("train/loss")
        if loss is None:  # a skipped step records none
            return
        loss = loss.detach().reshape(()).float()
        finite = torch.isfinite(loss)
        if self._mean is None:  # the first step, or the first after a resume: the state moves to the loss's device
            restored = self._restored or {"mean": 0.0, "var": 0.0, "nonfinite": 0.0}
            self._mean, self._var, self._nonfinite = (
                torch.tensor(restored[name], dtype=loss.dtype, device=loss.device)
                for name in ("mean", "var", "nonfinite")
            )
        # floored, so a loss that has barely moved yet does not turn a tiny wobble into a huge score
        std = torch.maximum(torch.sqrt(self._var), 1e-3 * self._mean.abs() + 1e-6)
        score = torch.where(finite, (loss - self._mean) / std, torch.zeros_like(loss))
        if self._seen < self.warmup_steps:
            score = torch.zeros_like(score)
        # Welford-style exponential update, skipped for a non-finite loss so one NaN cannot poison the statistics
        delta = torch.where(finite, loss - self._mean, torch.zeros_like(loss))
        if self._seen == 0:  # the first finite loss is the mean itself
            self._mean = torch.where(finite, loss, self._mean)
            delta = torch.zeros_like(delta)
        self._mean = self._mean + self.alpha * delta
        self._var = torch.where(finite, (1 - self.alpha) * (self._var + self.alpha * delta * delta), self._var)
        self._nonfinite = self._nonfinite + (~finite).to(loss.dtype)
        self._seen += 1
        self.trainer.record_metric(SPIKE_SCORE, score.float(), "max")
        self.trainer.record_metric(NONFINITE_COUNT, self._nonfinite.float(), "max")

    def on_log(self, step: int, metrics: dict[str, float]) -> None:
        score = metrics.get(SPIKE_SCORE)
        if self.warn_score is None or score is None or not math.isfinite(score):
            return
        if score > self.warn_score and not self._spiking and is_rank0():
            log.warning(
                "loss spike at step %d: train/loss %.4g is %.1f standard deviations above its running mean; "
                "if it repeats, lower optim.lr or check the data around this step",
                step,
                metrics.get("train/loss", float("nan")),
                score,
            )
        self._spiking = score > self.warn_score

    def state_dict(self) -> dict[str, Any]:
        if self._mean is None:
            return {"seen": self._seen, **(self._restored or {})}
        values = torch.stack([self._mean, self._var, self._nonfinite]).tolist()  # one sync, at checkpoint time
        return {"seen": self._seen, "mean": values[0], "var": values[1], "nonfinite": values[2]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._seen = int(state_dict.get("seen", 0))
        self._mean = self._var = self._nonfinite = None
        names = ("mean", "var", "nonfinite")
        self._restored = {name: float(state_dict[name]) for name in names} if "mean" in state_dict else None
