"""``kill -9`` a tiny training run at a chosen moment, resume it, and compare with a run that never stopped.

A moment is a time after the start, or a byte offset inside a synchronous or asynchronous checkpoint write
(the storage layer's write hook sends SIGKILL from the writing thread). The run is forked from a server process
that imported torch and this module once, so no interpreter or torch import is paid per moment; the resume runs
here. Used by
``tests/faults/test_kill.py`` (a few moments) and ``benchmarks/fault_kill.py`` (20).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from honing import storage
from honing.train import Checkpointer
from honing.train.checkpoint import MARKER
from tests.helpers import flat_weights, make_trainer

STEPS, SAVE_INTERVAL = 12, 3


@dataclass(frozen=True)
class Moment:
    """When to kill: ``seconds`` after the start, or ``offset`` bytes into the write of ``step``'s checkpoint
    (``part``: the DCP data, the trainer state, or the ``.complete`` marker), saved async or not."""

    async_save: bool
    seconds: float | None = None
    step: int | None = None
    part: str = "model_and_optim"
    offset: int = 0

    def describe(self) -> str:
        """One line naming the moment."""
        mode = "async" if self.async_save else "sync"
        if self.seconds is not None:
            return f"{mode} saves, killed {self.seconds:.2f}s after the start"
        return f"killed {self.offset} bytes into the {mode} write of step{self.step}'s {self.part}"


def train(save_folder: Path, *, async_save: bool, init_seed: int | None = None) -> torch.Tensor:
    """Train (or resume) the tiny run to ``STEPS`` and return its flattened weights."""
    trainer = make_trainer(
        save_folder,
        max_duration=f"{STEPS}steps",
        save_interval=SAVE_INTERVAL,
        async_save=async_save,
        init_seed=init_seed,
    )
    trainer.fit()
    return flat_weights(trainer)


def _kill_inside_write(moment: Moment) -> None:
    written = 0
    folder = f"step{moment.step}.tmp"

    def hook(path: str, nbytes: int) -> None:
        nonlocal written
        if folder in path and moment.part in path:
            written += nbytes
            if written > moment.offset:
                os.kill(os.getpid(), signal.SIGKILL)

    storage.set_write_hook(hook)


def _run_to_be_killed(save_folder: Path, moment: Moment) -> None:
    """The child: train, then leave without running any cleanup."""
    code = 0
    try:
        if moment.seconds is None:
            _kill_inside_write(moment)
        train(save_folder, async_save=moment.async_save)
    except BaseException:
        code = 1
    os._exit(code)


def _processes() -> multiprocessing.context.BaseContext:
    """Children forked from a server process that imported this module once and never ran a backward pass: a
    fork of a process whose autograd engine has started its device threads (a planner's backward on fake CUDA
    tensors, in the same test worker) cannot run autograd."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    return context


def run_killed(save_folder: Path, moment: Moment) -> bool:
    """Run the training in another process and SIGKILL it at ``moment``; True when it was killed before
    it finished (a run that finished first proves nothing)."""
    process = _processes().Process(target=_run_to_be_killed, args=(save_folder, moment))
    process.start()
    if moment.seconds is not None:
        deadline = time.monotonic() + moment.seconds
        while time.monotonic() < deadline:
            if not process.is_alive():  # it ended before the kill
                process.join()
                return False
            time.sleep(0.005)
        os.kill(process.pid, signal.SIGKILL)
    process.join()
    return process.exitcode == -signal.SIGKILL


def check_moment(save_folder: Path, moment: Moment, reference: torch.Tensor) -> str | None:
    """Kill a run at ``moment``, resume it, and return what went wrong (None: resumed bit-identically)."""
    if not run_killed(save_folder, moment):
        return f"{moment.describe()}: the run was not killed (it finished or failed first)"
    if (save_folder / "hf").exists():
        return f"{moment.describe()}: the run finished before the kill"
    # With a checkpoint to resume from, a different init proves the load replaced it; without one (killed
    # before the first save completed) the run starts again from the same init.
    saved = save_folder.exists() and any((save_folder / name / MARKER).exists() for name in os.listdir(save_folder))
    resumed = train(save_folder, async_save=moment.async_save, init_seed=1234 if saved else None)
    if not torch.equal(resumed, reference):
        return f"{moment.describe()}: resumed weights differ from the uninterrupted run's"
    if Checkpointer.latest_checkpoint(str(save_folder)) != str(save_folder / f"step{STEPS}"):
        return f"{moment.describe()}: the resumed run did not save its final checkpoint"
    return None


def random_moments(count: int, run_seconds: float, seed: int) -> list[Moment]:
    """``count`` moments: a third at random times, the rest at random offsets inside checkpoint writes,
    alternating synchronous and asynchronous saves."""
    rng = random.Random(seed)
    moments = []
    for index in range(count):
        async_save = index % 2 == 1
        if index % 3 == 0:
            moments.append(Moment(async_save, seconds=rng.uniform(0.05, 0.7) * run_seconds))
        else:
            step = rng.choice(range(SAVE_INTERVAL, STEPS + 1, SAVE_INTERVAL))
            part = rng.choice(["model_and_optim", "model_and_optim", "train", ".complete"])
            offset = rng.randrange(0, 40_000) if part == "model_and_optim" else 0
            moments.append(Moment(async_save, step=step, part=part, offset=offset))
    return moments
