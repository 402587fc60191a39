"""Turn SIGTERM and SIGINT into a graceful cancel: finish the step, save, exit 0."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable


class GracefulStop:
    """Installs handlers that call ``cancel(reason)``; a second SIGINT interrupts at once."""

    def __init__(self, cancel: Callable[[str], None]):
        self.cancel = cancel
        self._previous: dict[int, object] = {}
        self._interrupts = 0

    def __enter__(self) -> GracefulStop:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        self._previous.clear()

    def _handle(self, signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if signum == signal.SIGINT:
            self._interrupts += 1
            if self._interrupts > 1:
                raise KeyboardInterrupt
        self.cancel(f"received {name}")
