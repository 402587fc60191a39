"""Show training progress on rank 0: a live rich bar on a terminal, plain log lines otherwise."""

from __future__ import annotations

import sys
import time
from collections import deque
from datetime import timedelta
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn

from honing.distributed import is_rank0
from honing.train.callbacks.base import Callback
from honing.train.callbacks.order import PRIORITY

# What a method's users watch besides the loss (TRL's names): the loss of GRPO hovers near zero
# by construction, so its progress shows in the reward; DPO's in how often chosen beats rejected.
HEADLINE_METRICS = {"train/reward": "reward", "train/rewards/accuracies": "accuracy"}


def format_duration(seconds: float) -> str:
    """``H:MM:SS`` for a number of seconds (rounded down)."""
    return str(timedelta(seconds=int(max(seconds, 0))))


class ConsoleCallback(Callback):
    """Prints progress on rank 0 from the logged metrics: step, loss, lr, tokens/s, ETA, eval results.

    Rich mode (a terminal, or ``plain=False``) keeps one live bar that also shows the next
    checkpoint step. Plain mode (``plain=True``, or a stream that is not a terminal) writes one
    flushed line every ``log_interval`` steps (default: the trainer's ``metrics_collect_interval``),
    at the last step, and at any step with ``eval/*`` metrics. The ETA is the remaining steps times
    the recent wall time per step, which covers data loading, evaluation and checkpoints too.
    """

    priority = PRIORITY["console"]

    def __init__(self, *, log_interval: int | None = None, plain: bool | None = None, stream: TextIO | None = None):
        if log_interval is not None and log_interval < 1:
            raise ValueError(f"log_interval must be at least 1, got {log_interval}")
        self.log_interval = log_interval
        self.plain = plain
        self.stream = stream
        self.console: Console | None = None
        self._enabled = False
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._start = 0.0
        # (wall time, trainer.global_step) each time a batch of logs arrived: the ETA's rate
        self._progress_samples: deque[tuple[float, int]] = deque(maxlen=20)
        self._last_step = 0
        self._last_metrics: dict[str, float] = {}
        self._last_printed = True
        self._last_loss: float | None = None

    # --- events -------------------------------------------------------------------------
    def on_train_begin(self) -> None:
        self._enabled = is_rank0()
        if not self._enabled:
            return
        stream = self.stream or sys.stdout
        plain = self.plain if self.plain is not None else not _isatty(stream)
        self._start = time.perf_counter()
        self._progress_samples.clear()
        self._progress_samples.append((self._start, self.trainer.global_step))
        if plain:
            self.console = Console(file=stream, no_color=True, highlight=False)
        else:
            self.console = Console(file=stream, force_terminal=True, highlight=False)
            self._progress = Progress(
                TextColumn("{task.fields[head]}", markup=False),
                BarColumn(bar_width=20),
                TextColumn("{task.fields[info]}", markup=False),
                console=self.console,
                refresh_per_second=2,
            )
            self._task = self._progress.add_task(
                "train",
                total=self.trainer.stop_step,
                completed=self.trainer.global_step,
                head=self._head(self.trainer.global_step),
                info="",
            )
            self._progress.start()

    def on_log(self, step: int, metrics: dict[str, float]) -> None:
        if not self._enabled:
            return
        self._note_progress()
        self._last_step, self._last_metrics, self._last_printed = step, metrics, False
        if "train/loss" in metrics:
            self._last_loss = metrics["train/loss"]
        has_eval = any(name.startswith("eval/") for name in metrics)
        if self._progress is not None:
            # a line printed above the bar redraws the bar as last rendered (step 0 after the first logs): render
            # this step's first
            self._progress.update(
                self._task, completed=step, head=self._head(step), info=self._live_info(metrics), refresh=has_eval
            )
            if has_eval:
                self._print(self._line(step, metrics))
        elif has_eval or step == self.trainer.stop_step or step % self._interval() == 0:
            self._print(self._line(step, metrics))
            self._last_printed = True

    def on_train_end(self) -> None:
        if not self._enabled:
            return
        if self._progress is not None:
            self._stop_live()  # the bar stays on screen at its final state
        elif not self._last_printed and self._last_step:
            # a run that stopped early (cancel, token duration) still shows where it ended
            self._print(self._line(self._last_step, self._last_metrics))
        self._print(self._summary())
        self._enabled = False

    def on_error(self, error: BaseException) -> None:
        self._stop_live()
        self._enabled = False

    # --- text ---------------------------------------------------------------------------
    def _head(self, step: int) -> str:
        total = self.trainer.stop_step
        return f"step {step}/{total}" if total else f"step {step}"

    def _line(self, step: int, metrics: dict[str, float]) -> str:
        return " | ".join([self._head(step)] + self._info_parts(metrics))

    def _live_info(self, metrics: dict[str, float]) -> str:
        # eval results are printed above the bar instead, where they stay
        parts = self._info_parts(metrics, with_eval=False)
        next_save = self._next_checkpoint_step()
        if next_save is not None:
            parts.append(f"ckpt @ {next_save}")
        return " | ".join(parts)

    def _info_parts(self, metrics: dict[str, float], *, with_eval: bool = True) -> list[str]:
        parts = []
        if "train/loss" in metrics:
            parts.append(f"loss {metrics['train/loss']:.4f}")
        parts += [f"{label} {metrics[name]:.4f}" for name, label in HEADLINE_METRICS.items() if name in metrics]
        if "optim/lr" in metrics:
            parts.append(f"lr {metrics['optim/lr']:.2e}")
        if "throughput/tokens_per_s" in metrics:
            parts.append(f"{metrics['throughput/tokens_per_s']:,.0f} tok/s")
        eta = self.eta_seconds()
        if eta is not None:
            parts.append(f"eta {format_duration(eta)}")
        if with_eval:
            parts += [f"{name} {metrics[name]:.4f}" for name in sorted(metrics) if name.startswith("eval/")]
        return parts

    def _summary(self) -> str:
        trainer = self.trainer
        parts = [
            f"{'stopped' if trainer.canceled else 'done'}: {trainer.global_step} steps",
            f"{trainer.global_train_tokens_seen:,} tokens",
            format_duration(time.perf_counter() - self._start),
        ]
        if self._last_loss is not None:
            parts.append(f"final loss {self._last_loss:.4f}")
        parts.append(f"saved in {trainer.save_folder}")
        return " | ".join(parts)

    # --- progress -----------------------------------------------------------------------
    def eta_seconds(self) -> float | None:
        """Seconds until the stop step at the recent wall time per step (None when unknown)."""
        stop = self.trainer.stop_step
        if stop is None or len(self._progress_samples) < 2:
            return None
        (first_time, first_step), (last_time, last_step) = self._progress_samples[0], self._progress_samples[-1]
        seconds_per_step = (last_time - first_time) / (last_step - first_step)
        return max(stop - self.trainer.global_step, 0) * seconds_per_step

    def _note_progress(self) -> None:
        # logs of many steps arrive together after the collecting step; the trainer's own step
        # (not the logged one) says how far training really got by now
        step = self.trainer.global_step
        if step > self._progress_samples[-1][1]:
            self._progress_samples.append((time.perf_counter(), step))

    def _next_checkpoint_step(self) -> int | None:
        checkpointer = getattr(self.trainer, "callbacks", {}).get("checkpointer")
        interval = getattr(checkpointer, "save_interval", None)
        if not interval:
            return None
        next_save = (self.trainer.global_step // interval + 1) * interval
        stop = self.trainer.stop_step
        return min(next_save, stop) if stop else next_save  # the checkpointer also saves at the end

    def _interval(self) -> int:
        return self.log_interval or self.trainer.config.metrics_collect_interval

    # --- output -------------------------------------------------------------------------
    def _print(self, line: str) -> None:
        assert self.console is not None
        self.console.print(line, markup=False, emoji=False, soft_wrap=True)  # a log line is never wrapped
        self.console.file.flush()

    def _stop_live(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def _isatty(stream: object) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
