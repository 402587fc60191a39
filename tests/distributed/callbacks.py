"""Callbacks the multi-process tests load by import path (``callbacks.custom``) into real runs."""

from __future__ import annotations

import os
import signal

import torch

from honing.distributed import get_rank, is_rank0
from honing.models.parallel import full_state_dict
from honing.train import Callback


class DumpWeights(Callback):
    """Writes the full model weights to ``FOLDER/begin.pt`` when training begins (after any checkpoint
    is loaded) and to ``FOLDER/stepN.pt`` after each step in ``steps``; gathered on every rank, saved on rank 0."""

    def __init__(self, folder: str, steps: list[int] | None = None):
        self.folder = folder
        self.steps = set(steps or [])

    def on_train_begin(self) -> None:
        self._dump("begin.pt")

    def on_step_end(self) -> None:
        if self.step in self.steps:
            self._dump(f"step{self.step}.pt")

    def _dump(self, name: str) -> None:
        weights = full_state_dict(self.trainer.train_module.model)
        if is_rank0():
            os.makedirs(self.folder, exist_ok=True)
            torch.save(weights, os.path.join(self.folder, name))


class FailOnRank(Callback):
    """Makes one rank fail at the end of one step: ``raise`` an error, or ``kill`` the process (SIGKILL)."""

    def __init__(self, rank: int, step: int, how: str = "raise"):
        self.rank = rank
        self.fail_step = step
        self.how = how

    def on_step_end(self) -> None:
        if self.step != self.fail_step or get_rank() != self.rank:
            return
        if self.how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError(f"injected failure at step {self.step}")
