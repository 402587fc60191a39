"""The base of experiment-tracker callbacks (W&B, TensorBoard): rank 0 only, and never fatal."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from honing.config import redact
from honing.distributed import is_rank0
from honing.train.callbacks.base import Callback
from honing.train.callbacks.order import PRIORITY

log = logging.getLogger(__name__)


class TrackerCallback(Callback):
    """Mirrors every logged metric to an outside tracker on rank 0.

    A tracker is a convenience, not the record (``metrics.jsonl`` is): any error from it (missing
    package, bad key, network) warns once, turns the callback off and lets training go on.
    Subclasses implement ``start``, ``log_metrics`` and ``finish``.
    """

    backend = "tracker"
    # on_train_end closes the run: after the final evaluation, checkpoint, export, samples and
    # uploads have logged what they log, and before the console's summary (-100)
    priority = PRIORITY["tracker"]

    def __init__(self, *, config: Mapping[str, Any] | None = None):
        # redacted here too, so no caller can hand a secret to an outside service by mistake
        self.config: dict[str, Any] | None = redact(dict(config)) if config is not None else None
        self.active = False
        self._secrets: tuple[str, ...] = ()  # scrubbed from warning messages

    def start(self) -> None:
        """Open the tracker's run (called once on rank 0 at train begin)."""
        raise NotImplementedError

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        """Send one step's metrics."""
        raise NotImplementedError

    def finish(self, *, failed: bool) -> None:
        """Flush and close the tracker's run."""
        raise NotImplementedError

    def log_samples(self, step: int, name: str, rows: list[dict[str, Any]]) -> None:
        """Send generated text as a table (a tracker without tables ignores it)."""

    def on_train_begin(self) -> None:
        if not is_rank0():
            return
        self.active = True
        self._guard("start", self.start)

    def on_log(self, step: int, metrics: dict[str, float]) -> None:
        # both backends queue the write to their own background writer, so this does not block the step
        self._guard("logging", self.log_metrics, step, metrics)

    def on_log_samples(self, step: int, name: str, rows: list[dict[str, Any]]) -> None:
        self._guard("logging samples", self.log_samples, step, name, rows)

    def on_train_end(self) -> None:
        if self._guard("finishing", self.finish, failed=False):
            self.active = False

    def on_error(self, error: BaseException) -> None:
        if self._guard("finishing", self.finish, failed=True):
            self.active = False

    def _guard(self, action: str, fn: Callable[..., object], *args: object, **kwargs: object) -> bool:
        """Run ``fn`` while the tracker is active; on error warn once and switch it off. True if it ran."""
        if not self.active:
            return False
        try:
            fn(*args, **kwargs)
            return True
        except Exception as error:  # noqa: BLE001 - any tracker failure must leave training running
            self.active = False
            reason = f"{type(error).__name__}: {error}"
            for secret in self._secrets:
                reason = reason.replace(secret, "***")
            log.warning(
                "%s %s failed (%s); %s logging is off for the rest of this run, training goes on "
                "and metrics.jsonl is complete",
                self.backend,
                action,
                reason,
                self.backend,
            )
            try:
                self.finish(failed=True)
            except Exception:  # noqa: BLE001 - already warned; a half-open run has nothing left to save
                pass
            return False
