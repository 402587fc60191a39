"""Profile training steps ``start``..``stop`` with ``torch.profiler`` into ``SAVE_FOLDER/profiler/``."""

from __future__ import annotations

import logging
import os

import torch
from torch.profiler import ProfilerAction, ProfilerActivity

from honing.distributed import get_rank, is_rank0
from honing.train.callbacks.base import Callback
from honing.train.callbacks.order import PRIORITY

log = logging.getLogger(__name__)


class ProfilerCallback(Callback):
    """Records steps ``start`` to ``stop`` (inclusive) and writes one Chrome/TensorBoard trace per rank.

    The step before ``start`` is a warm-up step (profiler running, nothing kept) so the first
    recorded step does not pay the profiler's own start-up. Traces are ``rankN.*.pt.trace.json``;
    open them in TensorBoard's profiler plugin, Perfetto or ``chrome://tracing``.
    """

    priority = PRIORITY["profiler"]

    def __init__(
        self,
        *,
        start: int,
        stop: int,
        folder_name: str = "profiler",
        record_shapes: bool = False,
        profile_memory: bool = False,
    ):
        if not 1 <= start <= stop:
            raise ValueError(f"profiler steps must satisfy 1 <= start <= stop, got start={start}, stop={stop}")
        self.start = start
        self.stop = stop
        self.folder_name = folder_name
        self.record_shapes = record_shapes
        self.profile_memory = profile_memory
        self.profiler: torch.profiler.profile | None = None
        self._first_step = 1

    @property
    def trace_dir(self) -> str:
        """Where the traces are written."""
        return os.path.join(self.trainer.work_folder, self.folder_name)

    def action_for(self, step: int) -> ProfilerAction:
        """What the profiler does during training step ``step``."""
        if step == self.stop:
            return ProfilerAction.RECORD_AND_SAVE
        if self.start <= step < self.stop:
            return ProfilerAction.RECORD
        if step == self.start - 1:
            return ProfilerAction.WARMUP
        return ProfilerAction.NONE

    def on_train_begin(self) -> None:
        self._first_step = self.trainer.global_step + 1
        if self._first_step > self.stop:
            return  # resumed past the window
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self.profiler = torch.profiler.profile(
            activities=activities,
            # the profiler counts its own steps from 0 at start(); step n is training step first_step + n
            schedule=lambda n: self.action_for(self._first_step + n),
            on_trace_ready=torch.profiler.tensorboard_trace_handler(self.trace_dir, worker_name=f"rank{get_rank()}"),
            record_shapes=self.record_shapes,
            profile_memory=self.profile_memory,
        )
        self.profiler.start()

    def on_step_end(self) -> None:
        if self.profiler is None:
            return
        if self.trainer.global_step >= self.stop or self.trainer.training_complete:
            # stopping (not stepping) ends the trace with this step, without an empty span for the next
            self._close()
            if self.trainer.global_step >= self.start:
                log.info(
                    "profiler trace of steps %d-%d written to %s", self.start, self.trainer.global_step, self.trace_dir
                )
        else:
            self.profiler.step()

    def on_train_end(self) -> None:
        self._close()  # a cancel can stop training inside the window: keep what was recorded

    def on_error(self, error: BaseException) -> None:
        self._close()

    def _close(self) -> None:
        if self.profiler is not None:
            profiler, self.profiler = self.profiler, None
            profiler.stop()
            if is_rank0() and os.path.isdir(self.trace_dir):
                self.trainer.persist_working_file(self.trace_dir)  # uploaded when the save folder is remote
