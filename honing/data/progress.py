"""A progress bar over the work ``honing prepare`` does (rows, or input bytes), with rate and ETA on an interactive
stderr; elsewhere (a batch job's log) a line every ``log_seconds`` when asked, or nothing."""

from __future__ import annotations

import logging
import time
from typing import Literal

log = logging.getLogger(__name__)


class WorkProgress:
    """Counts ``total`` units of work (``rows`` or ``bytes``) done, shown as a rich progress bar when ``show``."""

    def __init__(
        self, total: int, show: bool, *, label: str, unit: Literal["rows", "bytes"], log_seconds: float | None = None
    ):
        self.progress = None
        self.unit, self.log_seconds = unit, log_seconds
        self.total, self.done, self.started = total, 0, time.perf_counter()
        self.logged = self.started
        if show:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TaskProgressColumn,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            counts = [MofNCompleteColumn()] if unit == "rows" else [TaskProgressColumn(), TransferSpeedColumn()]
            self.progress = Progress(TextColumn(label), BarColumn(), *counts, TextColumn("ETA"), TimeRemainingColumn())
            self.task = self.progress.add_task(label, total=max(total, 1))

    def __enter__(self) -> WorkProgress:
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()

    def advance(self, done: int) -> None:
        """Count ``done`` more units."""
        self.done += done
        if self.progress is not None:
            if done:
                self.progress.advance(self.task, done)
        elif self.log_seconds is not None and time.perf_counter() - self.logged >= self.log_seconds:
            self.logged = time.perf_counter()
            rate = self.done / max(self.logged - self.started, 1e-9)
            left = (self.total - self.done) / max(rate, 1e-9)
            log.info(
                "tokenized %s of %s %s (%.0f %s/s, about %.0f s left)",
                f"{self.done:,}",
                f"{self.total:,}",
                self.unit,
                rate,
                self.unit,
                left,
            )
