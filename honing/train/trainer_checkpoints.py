"""The Trainer's state and checkpoints: what a checkpoint holds of the run, saving it, and loading it back. The
Trainer's ``checkpoints``.

Kept apart from the loop (``trainer.py``): the loop only calls ``save_checkpoint*`` through the checkpointer
callback and ``load_at_start`` when ``fit`` begins.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch

from honing import storage
from honing.config.schema import TrainerSection
from honing.distributed import (
    barrier,
    get_world_size,
    is_rank0,
    seed_all,
)
from honing.errors import CheckpointError
from honing.train.callbacks.base import Callback
from honing.train.callbacks.checkpointer import CheckpointerCallback
from honing.train.checkpoint import CORRUPT_SUFFIX, Checkpointer
from honing.train.checkpoint_io import TRAIN_DIR
from honing.train.common import LoadStrategy
from honing.train.config_change import COMPARED_FILES, check_resume
from honing.train.rng import rng_state, set_rng_state
from honing.train.train_module import TrainModule
from honing.train.trainer_metrics import Metrics
from honing.train.trainer_progress import Progress

log = logging.getLogger(__name__)


class Checkpoints:
    """Turns the run into a checkpoint and back: ``progress`` (its counters and data loader), the RNG and the
    ``callbacks``' states as the trainer state, ``train_module`` as the model and optimizer, written by
    ``checkpointer`` with ``extra_files``; loads follow the trainer section's ``load_*`` settings. ``metrics``
    is asked for a finite loss before every save, ``emit`` announces saves and loads to the callbacks."""

    def __init__(
        self,
        config: TrainerSection,
        *,
        checkpointer: Checkpointer,
        train_module: TrainModule,
        extra_files: dict[str, str | bytes],
        progress: Progress,
        metrics: Metrics,
        callbacks: dict[str, Callback],
        emit: Callable[..., None],
    ):
        self.config = config  # replaced by the Trainer when a load setting is set on it
        self.checkpointer = checkpointer
        self.train_module = train_module
        self.extra_files = extra_files
        self._progress = progress
        self._metrics = metrics
        self._callbacks = callbacks  # the Trainer's registry, the same dict: callbacks added later are saved too
        self._emit = emit
        self.last_checkpoint_step: int | None = None  # the step of the newest checkpoint this run saved or loaded
        self.loaded = False  # whether a checkpoint was loaded (by fit, or by a call before it, which fit keeps)
        self.pending_saved: list[str] = []  # async saves finished, not yet announced to callbacks

    @property
    def save_folder(self) -> str:
        """Where the run's checkpoints go."""
        return self.config.save_folder

    # --- state ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The trainer's own state for this rank: progress, data position, RNG, callbacks."""
        progress = self._progress
        return {
            "global_step": progress.global_step,
            "global_train_tokens_seen": progress.global_train_tokens_seen,
            "global_train_petaflops": progress.global_train_petaflops,
            "epoch": progress.epoch,
            "world_size": get_world_size(),
            "seed": getattr(self.config, "seed", None),  # an OLMo-core TrainerConfig has none
            "data_loader": progress.data_loader.state_dict(),
            "rng": rng_state(),
            "callbacks": {name: cb.state_dict() for name, cb in self._callbacks.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned (RNG only when the world size is unchanged)."""
        progress = self._progress
        progress.global_step = int(state["global_step"])
        progress.global_train_tokens_seen = int(state["global_train_tokens_seen"])
        progress.global_train_petaflops = float(state.get("global_train_petaflops", 0.0))  # absent before issue 35
        progress.epoch = int(state["epoch"])
        progress.data_loader.load_state_dict(state["data_loader"])
        same_world = state.get("world_size", 1) == get_world_size() and not state.get("_world_size_changed")
        seed, saved_seed = getattr(self.config, "seed", None), state.get("seed")  # absent before issue 45
        same_seed = seed is None or saved_seed is None or int(saved_seed) == int(seed)
        if same_world and same_seed:
            set_rng_state(state["rng"])
        else:
            # Saved per-rank states do not map onto the new ranks, and a changed trainer.seed must take effect;
            # every rank restarts from the run's seed (torch's initial seed, set by prepare_training_environment)
            # plus the step.
            seed_all(torch.initial_seed() + progress.global_step)
            what = (
                f"world size changed since the checkpoint ({state.get('world_size')} → {get_world_size()})"
                if not same_world
                else f"trainer.seed changed since the checkpoint ({saved_seed} → {seed})"
            )
            log.warning(
                "%s: the data position is kept, RNG states are re-seeded from the seed plus the step (%d), so "
                "random draws (e.g. dropout) differ from an uninterrupted run",
                what,
                progress.global_step,
            )
        for name, callback_state in state.get("callbacks", {}).items():
            if name in self._callbacks:
                self._callbacks[name].load_state_dict(callback_state)

    # --- checkpoints ----------------------------------------------------------------
    def checkpoint_dir(self, step: int | None = None) -> str:
        """``SAVE_FOLDER/stepN`` for this (or the given) step."""
        return storage.join(self.save_folder, f"step{self._progress.global_step if step is None else step}")

    def save(self, ephemeral: bool = False) -> str:
        """Save a checkpoint of the current step and wait for it to be complete. An ``ephemeral`` one is
        marked so in its metadata and removed by the CheckpointerCallback once a later one is complete."""
        self._metrics.check_loss_finite()  # never save weights a NaN or inf loss has already broken
        path = self.checkpoint_dir()
        self._note_ephemeral(ephemeral)  # first, so the callbacks' saved state knows it
        self.checkpointer.save(
            path, self.train_module, self.state_dict(), extra_files=self.extra_files, ephemeral=ephemeral
        )
        self.last_checkpoint_step = self._progress.global_step
        self._emit("on_checkpoint_saved", path)
        return path

    def save_async(self, ephemeral: bool = False) -> tuple[str, Future]:
        """Stage a checkpoint of the current step and write it in the background (``ephemeral``: as for
        ``save``); returns its path and a future done when it is complete, as OLMo-core's."""
        self._metrics.check_loss_finite()  # never save weights a NaN or inf loss has already broken
        path = self.checkpoint_dir()
        self._note_ephemeral(ephemeral)  # first, so the callbacks' saved state knows it
        future = self.checkpointer.save_async(
            path, self.train_module, self.state_dict(), extra_files=self.extra_files, ephemeral=ephemeral
        )
        self.last_checkpoint_step = self._progress.global_step
        future.add_done_callback(lambda f: f.exception() is None and self.pending_saved.append(path))
        return path, future

    def _note_ephemeral(self, ephemeral: bool) -> None:
        # the checkpointer callbacks remove ephemeral checkpoints, whoever asked for them
        if ephemeral:
            for callback in self._callbacks.values():
                if isinstance(callback, CheckpointerCallback):
                    callback.mark_ephemeral(self._progress.global_step)

    def announce_saves(self) -> None:
        """Announce the background saves that finished to the callbacks, on the training thread (never from the
        writer thread)."""
        while self.pending_saved:
            self._emit("on_checkpoint_saved", self.pending_saved.pop(0))

    @property
    def load_strategy(self) -> LoadStrategy:
        """Whether ``fit`` loads a checkpoint first (``if_available``, ``always`` or ``never``)."""
        return LoadStrategy(self.config.load_strategy)

    def load(self, path: str, *, load_trainer_state: bool | None = None, load_optim_state: bool | None = None) -> None:
        """Load a checkpoint directory, or the newest checkpoint of a folder of them (a save folder; OLMo-core's
        form): the model weights, the trainer state (step, tokens, data position, RNG, callbacks) unless
        ``load_trainer_state`` is False, and the optimizer (with the train module's extra state, e.g. its LR
        scheduler) when ``load_optim_state`` is True. None takes the trainer's own setting; a ``load_trainer_state``
        that is None there too loads the trainer state when the checkpoint has one (OLMo-core's meaning), and a
        ``load_optim_state`` that is None follows ``load_trainer_state``."""
        if not Checkpointer.dir_is_checkpoint(path):
            path = self.checkpointer.latest_checkpoint(path)  # FileNotFoundError when the folder holds none
        load_trainer_state = self.config.load_trainer_state if load_trainer_state is None else load_trainer_state
        if load_trainer_state is None:
            load_trainer_state = storage.exists(storage.join(path, TRAIN_DIR, "rank0.pt"))
        load_optim_state = self.config.load_optim_state if load_optim_state is None else load_optim_state
        load_optim_state = load_trainer_state if load_optim_state is None else load_optim_state
        state = self.checkpointer.load(
            path, self.train_module, load_optimizer_state=load_optim_state, load_trainer_state=load_trainer_state
        )
        if state is not None:
            self.load_state_dict(state)
            self.last_checkpoint_step = self._progress.global_step
            log.info("loaded checkpoint %s (step %d)", path, self._progress.global_step)
        else:
            log.info(
                "loaded the weights%s of checkpoint %s; the step (%d), data position, RNG and callback "
                "states are this run's",
                "" if not load_optim_state else " and optimizer state",
                path,
                self._progress.global_step,
            )
        self.loaded = True
        self._emit("post_checkpoint_loaded", path)

    def maybe_load(
        self, folder: str | None = None, *, load_trainer_state: bool | None = None, load_optim_state: bool | None = None
    ) -> bool:
        """Load the newest loadable checkpoint in ``folder`` (default: the save folder), falling back
        to older ones when the newest is corrupt (what it loads: as ``load``). Returns whether
        one was loaded."""
        folder = folder or self.save_folder
        if is_rank0() and storage.isdir(folder):
            for removed in Checkpointer.clean_incomplete(folder):
                log.warning("removed incomplete checkpoint %s", removed)
        barrier()
        if Checkpointer.dir_is_checkpoint(folder):
            candidates = [folder]
        else:
            candidates = [path for _, path in reversed(Checkpointer.find_checkpoints(folder))]
        skipped = []
        loaded = False
        for path in candidates:
            if folder == self.save_folder:  # this run's own checkpoints: resuming needs a compatible config
                self._check_config_change(path)
            try:
                self.load(path, load_trainer_state=load_trainer_state, load_optim_state=load_optim_state)
                loaded = True
                break
            except CheckpointError as error:
                reason = str(error).removeprefix(f"{path}: ")  # the warning names the path once
                log.warning("skipping checkpoint %s: %s; trying the previous one", path, reason)
                skipped.append(path)
        if skipped and folder == self.save_folder and candidates != [folder]:  # never the save folder itself
            self._move_aside(skipped)
        return loaded

    def _check_config_change(self, path: str) -> None:
        # Raises ConfigError (not CheckpointError: no fallback to an older checkpoint of the same config)
        saved = {}
        for name in COMPARED_FILES:
            file = storage.join(path, name)
            try:
                saved[name] = storage.read_bytes(file) if storage.exists(file) else None
            except OSError:
                saved[name] = None  # unreadable: loading the checkpoint reports it
        allowed = check_resume(path, saved, self.extra_files)
        if allowed and is_rank0():
            log.warning(
                "resuming from %s with a changed config, in force from the resumed step: %s",
                path,
                "; ".join(change.describe() for change in allowed),
            )

    def _move_aside(self, corrupt: list[str]) -> None:
        # A corrupt stepN left in place would block this run's own save of step N (it exists and is
        # complete) and be tried again on every start; it is kept, renamed, for whoever wants to look.
        barrier()  # every rank is done reading them
        if is_rank0():
            for path in corrupt:
                aside = f"{path.rstrip('/')}{CORRUPT_SUFFIX}"
                storage.rm(aside)
                storage.rename(path, aside)
                log.warning("moved the unloadable checkpoint %s aside to %s", path, aside)
        barrier()

    def load_at_start(self) -> None:
        """What ``fit`` loads first: the save folder's newest checkpoint, else ``load_path``'s (a warm start),
        unless ``load_strategy`` is ``never`` or a checkpoint was loaded before ``fit`` (OLMo-core's scripts:
        ``trainer.load_checkpoint(...); trainer.fit()``), which is kept."""
        if self.load_strategy == LoadStrategy.never or self.loaded:
            return
        # The save folder holds this run's own checkpoints: resuming from them restores everything, as in
        # OLMo-core. load_trainer_state / load_optim_state apply to load_path (a warm start from another run).
        if self.save_folder and self.maybe_load(self.save_folder, load_trainer_state=True, load_optim_state=True):
            if self.config.load_path:
                log.info("resumed from the save folder's checkpoint; load_path %r is not used", self.config.load_path)
            return
        if self.config.load_path and self.maybe_load(self.config.load_path):
            return
        if self.load_strategy == LoadStrategy.always:
            raise CheckpointError(
                f"load_strategy is 'always' but no loadable checkpoint was found in "
                f"{self.save_folder!r}" + (f" or {self.config.load_path!r}" if self.config.load_path else "")
            )

    def finish_staged(self) -> None:
        """After a failure: an asynchronous save staged before it is still written (every rank's writer thread runs
        apart from training, so it does not wait on the failed step; it fails fast if a peer died)."""
        try:
            self.checkpointer.wait()
        except Exception as error:
            log.warning("the checkpoint being written when training failed is incomplete: %s", error)
