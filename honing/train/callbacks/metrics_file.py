"""Append every logged step's metrics to ``SAVE_FOLDER/metrics.jsonl``."""

from __future__ import annotations

import json
import math
import os
import threading
from typing import Any

from honing import storage
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
        """Where the metrics are written: the save folder, or a remote one's local work folder."""
        return os.path.join(self.trainer.work_folder, self.file_name)

    def on_train_begin(self) -> None:
        remote = storage.join(self.trainer.save_folder, self.file_name)
        # a run resumed on another machine continues the remote file rather than starting a new one
        if is_rank0() and storage.is_url(remote) and not os.path.exists(self.path) and storage.exists(remote):
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with open(self.path, "wb") as handle:
                handle.write(storage.read_bytes(remote))

    def on_checkpoint_saved(self, path: str) -> None:
        if is_rank0():  # a remote save folder gets the file with every checkpoint (no-op when local)
            self.trainer.run_bookkeeping_op(self._persist)

    def on_train_end(self) -> None:
        if is_rank0():
            self._persist()

    def _persist(self) -> None:
        self._flush()
        if os.path.exists(self.path):
            self.trainer.persist_working_file(self.path)

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
        with self._lock:  # held while writing: a flush at train end may race the bookkeeping thread's
            lines, self._pending = self._pending, []
            if lines:
                os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
                with open(self.path, "a", encoding="utf-8") as handle:
                    handle.writelines(lines)
