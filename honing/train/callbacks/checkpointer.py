"""Save checkpoints at intervals, keep the last few, and always save when training ends."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from honing.distributed import is_rank0
from honing.train.callbacks.base import Callback
from honing.train.callbacks.order import PRIORITY

log = logging.getLogger(__name__)


@dataclass(eq=False, kw_only=True)
class CheckpointerCallback(Callback):
    """Saves ``SAVE_FOLDER/stepN`` every ``save_interval`` steps (async by default) and at the end.

    With ``save_at_epoch_end`` the last step of every epoch is saved as well. Ephemeral checkpoints (every
    ``ephemeral_save_interval`` steps, and any saved with ``trainer.save_checkpoint(ephemeral=True)``) are deleted
    once a later checkpoint is complete; ``keep_last`` permanent ones are kept. Under ``trainer.no_checkpoints`` it
    saves nothing. ``save_interval`` defaults to OLMo-core's 250 (a config's ``callbacks.checkpointer`` sets its own).
    """

    priority = PRIORITY["checkpointer"]

    save_interval: int = 250
    ephemeral_save_interval: int | None = None
    keep_last: int | None = None
    async_save: bool = True
    # steps other callbacks want kept (e.g. the best model) even past keep_last
    protected_steps: set[int] = field(default_factory=set)
    save_at_epoch_end: bool = False

    def __post_init__(self) -> None:
        self.protected_steps = set(self.protected_steps)  # this callback's own copy: it adds and removes steps
        self._ephemeral: list[int] = []
        self._permanent: list[int] = []
        # saved on request (save_extra) or released from protection: removed once unprotected
        self._extra: list[int] = []

    def next_save_step(self) -> int:
        """The next step at which a checkpoint will be saved."""
        intervals = [self.save_interval] + ([self.ephemeral_save_interval] if self.ephemeral_save_interval else [])
        return min((self.step // i + 1) * i for i in intervals)

    def saves_at(self, step: int) -> bool:
        """True when this callback saves a checkpoint at ``step`` on its own."""
        return step % self.save_interval == 0 or bool(
            self.ephemeral_save_interval and step % self.ephemeral_save_interval == 0
        )

    def save_extra(self) -> None:
        """Save a checkpoint of this step outside the interval (kept while it is protected)."""
        if self.trainer.last_checkpoint_step != self.step:
            self._extra.append(self.step)
            self._save_now()

    def mark_ephemeral(self, step: int) -> None:
        """Treat the checkpoint of ``step`` as ephemeral: removed once a later checkpoint is complete."""
        if step not in self._ephemeral and step not in self._permanent:
            self._ephemeral.append(step)

    def release(self, step: int) -> None:
        """Stop protecting ``step``; it is removed later unless keep_last still keeps it."""
        self.protected_steps.discard(step)
        if step not in self._permanent and step not in self._extra:
            self._extra.append(step)

    def on_step_end(self) -> None:
        step = self.step
        if step % self.save_interval == 0:
            self._save(ephemeral=False)
        elif self.ephemeral_save_interval and step % self.ephemeral_save_interval == 0:
            self._save(ephemeral=True)

    def on_epoch_end(self) -> None:
        # an epoch's last step is a permanent checkpoint too (HF's save_strategy "epoch"), once per step
        if self.save_at_epoch_end and self.step and self.trainer.last_checkpoint_step != self.step:
            self._save(ephemeral=False)

    def on_train_end(self) -> None:
        if self.trainer.last_checkpoint_step != self.step:
            self.async_save = False  # the process is about to exit: write it now
            self._save(ephemeral=False)

    def on_checkpoint_saved(self, path: str) -> None:
        self._prune()

    def _save(self, *, ephemeral: bool) -> None:
        (self._ephemeral if ephemeral else self._permanent).append(self.step)
        self._save_now(ephemeral=ephemeral)

    def _save_now(self, *, ephemeral: bool = False) -> None:
        if getattr(self.trainer, "no_checkpoints", False):
            return
        if self.async_save:
            self.trainer.save_checkpoint_async(ephemeral=ephemeral)
        else:
            self.trainer.save_checkpoint(ephemeral=ephemeral)

    def _prune(self) -> None:
        # only complete checkpoints older than the newest complete one are ever removed; for a remote save
        # folder "complete" means uploaded, so a local copy whose upload is not confirmed is kept
        complete = {step for step, _ in self.trainer.checkpointer.confirmed_checkpoints(self.trainer.save_folder)}
        newest = max(complete, default=None)
        if newest is None:
            return
        doomed = [s for s in self._ephemeral if s < newest and s in complete]
        self._ephemeral = [s for s in self._ephemeral if s not in doomed]
        released = [s for s in self._extra if s < newest and s in complete and s not in self.protected_steps]
        self._extra = [s for s in self._extra if s not in released]
        doomed += released
        if self.keep_last:
            saved = [s for s in self._permanent if s in complete]
            old = saved[: max(0, len(saved) - self.keep_last)]
            doomed += old
            self._permanent = [s for s in self._permanent if s not in old]
        for step in doomed:
            if step in self.protected_steps or step == newest:
                continue
            if is_rank0():
                log.info("removing old checkpoint step%d", step)
                self.trainer.checkpointer.delete(self.trainer.checkpoint_dir(step))

    def state_dict(self) -> dict[str, Any]:
        return {
            "ephemeral": list(self._ephemeral),
            "permanent": list(self._permanent),
            "extra": list(self._extra),
            "protected": sorted(self.protected_steps),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._ephemeral = list(state_dict.get("ephemeral", []))
        self._permanent = list(state_dict.get("permanent", []))
        self._extra = list(state_dict.get("extra", []))
        self.protected_steps |= set(state_dict.get("protected", []))
