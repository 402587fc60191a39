"""Turn Python's automatic garbage collection off during training and collect at fixed steps instead."""

from __future__ import annotations

import gc

from honing.train.callbacks.base import Callback


class GarbageCollectorCallback(Callback):
    """Disables automatic GC for the run and runs a young-generation collection every ``interval`` steps.

    Automatic collections start whenever allocation counts cross a threshold, so they pause a
    random rank at a random point of a step (and stall every other rank at the next collective);
    collecting at the same step everywhere keeps steps even. GC is re-enabled when training ends
    or fails, if it was enabled before.
    """

    def __init__(self, *, interval: int = 100):
        if interval < 1:
            raise ValueError(f"interval must be at least 1, got {interval}")
        self.interval = interval
        self._was_enabled: bool | None = None

    def on_train_begin(self) -> None:
        self._was_enabled = gc.isenabled()
        gc.disable()
        gc.collect(1)  # start clean: what model and data set-up left behind

    def on_step_end(self) -> None:
        if self.step % self.interval == 0:
            gc.collect(1)

    def on_train_end(self) -> None:
        self._restore()

    def on_error(self, error: BaseException) -> None:
        self._restore()

    def _restore(self) -> None:
        if self._was_enabled:
            gc.enable()
        self._was_enabled = None
