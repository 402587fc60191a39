"""Append every logged step's metrics to ``SAVE_FOLDER/metrics.jsonl``."""

from __future__ import annotations

import json
import math
import os
import threading
from typing import Any

from honing.distributed import is_rank0
from honing.train.callbacks.base import Callback


class MetricsFileCallback(Callback):
    """One JSON object per logged step (``step`` plus every metric); written off the hot path.

    The file is only ever appended to, so a resumed run never loses lines an earlier run wrote;
    readers take the last line for a step that appears twice.
    """

    def __init__(self, *, file_name: str = "metrics.jsonl"):
        self.file_name = file_name
        self._pending: list[str] = []
        self._lock = threading.Lock()

    @property
    def path(self) -> str:
        """Where the metrics are written."""
        return os.path.join(self.trainer.save_folder, self.file_name)

    def on_log(self, step: int, metrics: dict[str, float]) -> None:
        if not is_rank0():
            return
        record: dict[str, Any] = {"step": step}
        record.update({k: (v if math.isfinite(v) else str(v)) for k, v in sorted(metrics.items())})
        with self._lock:
            self._pending.append(json.dumps(record) + "\n")
            first = len(self._pending) == 1
        if first:  # one write for all the steps logged together, not one per step
            self.trainer.run_bookkeeping_op(self._flush)

    def _flush(self) -> None:
        with self._lock:
            lines, self._pending = self._pending, []
        if lines:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.writelines(lines)
