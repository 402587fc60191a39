"""The Trainer's state and checkpoints: what a checkpoint holds of the run, saving it, and loading it back.

Kept apart from the loop (``trainer.py``): the loop only calls ``save_checkpoint*`` through the checkpointer
callback and ``_load_at_start`` when ``fit`` begins.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future
from typing import Any

import torch

from honing import storage
from honing.distributed import (
    barrier,
    get_world_size,
    is_rank0,
    seed_all,
)
from honing.errors import CheckpointError
from honing.train.callbacks.checkpointer import CheckpointerCallback
from honing.train.checkpoint import CORRUPT_SUFFIX, Checkpointer
from honing.train.checkpoint_io import TRAIN_DIR
from honing.train.common import LoadStrategy
from honing.train.config_change import COMPARED_FILES, check_resume
from honing.train.rng import rng_state, set_rng_state

log = logging.getLogger(__name__)


class TrainerCheckpoints:
    """The part of ``Trainer`` that turns the run into a checkpoint and back (the Trainer sets the attributes
    these methods use: ``checkpointer``, ``train_module``, ``data_loader``, ``callbacks`` ...)."""

    # --- state ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The trainer's own state for this rank: progress, data position, RNG, callbacks."""
        return {
            "global_step": self.global_step,
            "global_train_tokens_seen": self.global_train_tokens_seen,
            "global_train_petaflops": self.global_train_petaflops,
            "epoch": self.epoch,
            "world_size": get_world_size(),
            "seed": getattr(self.config, "seed", None),  # an OLMo-core TrainerConfig has none
            "data_loader": self.data_loader.state_dict(),
            "rng": rng_state(),
            "callbacks": {name: cb.state_dict() for name, cb in self.callbacks.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned (RNG only when the world size is unchanged)."""
        self.global_step = int(state["global_step"])
        self.global_train_tokens_seen = int(state["global_train_tokens_seen"])
        self.global_train_petaflops = float(state.get("global_train_petaflops", 0.0))  # absent before issue 35
        self.epoch = int(state["epoch"])
        self.data_loader.load_state_dict(state["data_loader"])
        same_world = state.get("world_size", 1) == get_world_size() and not state.get("_world_size_changed")
        seed, saved_seed = getattr(self.config, "seed", None), state.get("seed")  # absent before issue 45
        same_seed = seed is None or saved_seed is None or int(saved_seed) == int(seed)
        if same_world and same_seed:
            set_rng_state(state["rng"])
        else:
            # Saved per-rank states do not map onto the new ranks, and a changed trainer.seed must take effect;
            # every rank restarts from the run's seed (torch's initial seed, set by prepare_training_environment)
            # plus the step.
            seed_all(torch.initial_seed() + self.global_step)
            what = (
                f"world size changed since the checkpoint ({state.get('world_size')} → {get_world_size()})"
                if not same_world
                else f"trainer.seed changed since the checkpoint ({saved_seed} → {seed})"
            )
            log.warning(
                "%s: the data position is kept, RNG states are re-seeded from the seed plus the step (%d), so "
                "random draws (e.g. dropout) differ from an uninterrupted run",
                what,
                self.global_step,
            )
        for name, callback_state in state.get("callbacks", {}).items():
            if name in self.callbacks:
                self.callbacks[name].load_state_dict(callback_state)

    # --- checkpoints ----------------------------------------------------------------
    def checkpoint_dir(self, step: int | None = None) -> str:
        """``SAVE_FOLDER/stepN`` for this (or the given) step."""
        return storage.join(self.save_folder, f"step{self.global_step if step is None else step}")

    def save_checkpoint(self, ephemeral: bool = False) -> str:
        """Save a checkpoint of the current step and wait for it to be complete. An ``ephemeral`` one is
        marked so in its metadata and removed by the CheckpointerCallback once a later one is complete."""
        self.check_loss_finite()  # never save weights a NaN or inf loss has already broken
        path = self.checkpoint_dir()
        self._note_ephemeral(ephemeral)  # first, so the callbacks' saved state knows it
        self.checkpointer.save(
            path, self.train_module, self.state_dict(), extra_files=self.extra_checkpoint_files, ephemeral=ephemeral
        )
        self._last_checkpoint_step = self.global_step
        self._emit("on_checkpoint_saved", path)
        return path

    def save_checkpoint_async(self, ephemeral: bool = False) -> tuple[str, Future]:
        """Stage a checkpoint of the current step and write it in the background (``ephemeral``: as for
        ``save_checkpoint``); returns its path and a future done when it is complete, as OLMo-core's."""
        self.check_loss_finite()  # never save weights a NaN or inf loss has already broken
        path = self.checkpoint_dir()
        self._note_ephemeral(ephemeral)  # first, so the callbacks' saved state knows it
        future = self.checkpointer.save_async(
            path, self.train_module, self.state_dict(), extra_files=self.extra_checkpoint_files, ephemeral=ephemeral
        )
        self._last_checkpoint_step = self.global_step
        future.add_done_callback(lambda f: f.exception() is None and self._pending_saved.append(path))
        return path, future

    def _note_ephemeral(self, ephemeral: bool) -> None:
        # the checkpointer callbacks remove ephemeral checkpoints, whoever asked for them
        if ephemeral:
            for callback in self.callbacks.values():
                if isinstance(callback, CheckpointerCallback):
                    callback.mark_ephemeral(self.global_step)

    def _announce_async_saves(self) -> None:
        # callbacks run on the training thread, never from the writer thread
        while self._pending_saved:
            self._emit("on_checkpoint_saved", self._pending_saved.pop(0))

    @property
    def load_strategy(self) -> LoadStrategy:
        """Whether ``fit`` loads a checkpoint first (``if_available``, ``always`` or ``never``)."""
        return LoadStrategy(self.config.load_strategy)

    @property
    def last_checkpoint_step(self) -> int | None:
        """The step of the most recent checkpoint this run saved (or loaded)."""
        return self._last_checkpoint_step

    @property
    def checkpoint_loaded(self) -> bool:
        """Whether a checkpoint was loaded (by ``fit``, or by a call before it, which ``fit`` then keeps)."""
        return self._checkpoint_loaded

    def load_checkpoint(
        self, path: str, *, load_trainer_state: bool | None = None, load_optim_state: bool | None = None
    ) -> None:
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
            self._last_checkpoint_step = self.global_step
            log.info("loaded checkpoint %s (step %d)", path, self.global_step)
        else:
            log.info(
                "loaded the weights%s of checkpoint %s; the step (%d), data position, RNG and callback "
                "states are this run's",
                "" if not load_optim_state else " and optimizer state",
                path,
                self.global_step,
            )
        self._checkpoint_loaded = True
        self._emit("post_checkpoint_loaded", path)

    def maybe_load_checkpoint(
        self, folder: str | None = None, *, load_trainer_state: bool | None = None, load_optim_state: bool | None = None
    ) -> bool:
        """Load the newest loadable checkpoint in ``folder`` (default: the save folder), falling back
        to older ones when the newest is corrupt (what it loads: as ``load_checkpoint``). Returns whether
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
                self.load_checkpoint(path, load_trainer_state=load_trainer_state, load_optim_state=load_optim_state)
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
        allowed = check_resume(path, saved, self.extra_checkpoint_files)
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

    def _load_at_start(self) -> None:
        # a checkpoint loaded before fit (OLMo-core's scripts: trainer.load_checkpoint(...); trainer.fit()) is kept
        if self.load_strategy == LoadStrategy.never or self.no_checkpoints or self.checkpoint_loaded:
            return
        # The save folder holds this run's own checkpoints: resuming from them restores everything, as in
        # OLMo-core. load_trainer_state / load_optim_state apply to load_path (a warm start from another run).
        if self.save_folder and self.maybe_load_checkpoint(
            self.save_folder, load_trainer_state=True, load_optim_state=True
        ):
            if self.config.load_path:
                log.info("resumed from the save folder's checkpoint; load_path %r is not used", self.config.load_path)
            return
        if self.config.load_path and self.maybe_load_checkpoint(self.config.load_path):
            return
        if self.load_strategy == LoadStrategy.always:
            raise CheckpointError(
                f"load_strategy is 'always' but no loadable checkpoint was found in "
                f"{self.save_folder!r}" + (f" or {self.config.load_path!r}" if self.config.load_path else "")
            )
