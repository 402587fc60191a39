"""The callback base class: every event the Trainer emits, each a no-op by default."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from honing.train.trainer import Trainer


class Callback:
    """Hook into training; higher ``priority`` runs earlier. State returned by ``state_dict`` is checkpointed.

    The Trainer calls only the events below that a callback overrides. A callback written with OLMo-core's names
    (``post_step``, ...) or VeOmni's form (``on_step_end(self, state, **kwargs)``) is adapted to these once, when a
    recipe or OLMo-core's ``TrainerConfig`` registers it (``honing.interop.callback_names``).
    """

    priority: int = 0
    trainer: Trainer

    def attach(self, trainer: Trainer) -> None:
        """Called by the Trainer when the callback is registered."""
        self.trainer = trainer

    @property
    def step(self) -> int:
        """The trainer's current global step."""
        return self.trainer.global_step

    def on_train_begin(self) -> None:
        """Before the first step (after any checkpoint is loaded)."""

    def on_epoch_begin(self) -> None:
        """At the start of each epoch (also a resumed one)."""

    def on_step_begin(self) -> None:
        """Before a step's batch is trained on."""

    def post_train_batch(self) -> None:
        """After a step's optimizer update, before ``on_step_end`` (OLMo-core's name)."""

    def pre_optim_step(self) -> None:
        """After a step's forward and backward passes, right before clipping and the optimizer step (OLMo-core)."""

    def on_step_end(self) -> None:
        """After a step's optimizer update."""

    def on_epoch_end(self) -> None:
        """After the last batch of an epoch."""

    def on_train_end(self) -> None:
        """After training stops for any normal reason (duration, hard stop, cancel)."""

    def on_checkpoint_saved(self, path: str) -> None:
        """After a checkpoint at ``path`` is complete on storage."""

    def post_checkpoint_loaded(self, path: str) -> None:
        """After ``fit`` (or ``load_checkpoint``) restored the checkpoint at ``path`` (OLMo-core's name)."""

    def post_attach(self) -> None:
        """Right after the callback is registered with a trainer (OLMo-core's name)."""

    def on_log(self, step: int, metrics: dict[str, float]) -> None:
        """With the collected (rank-reduced) metrics of one step."""

    def on_log_samples(self, step: int, name: str, rows: list[dict[str, Any]]) -> None:
        """With text generated at ``step`` (rows of the same keys, e.g. prompt and text), for trackers."""

    def on_error(self, error: BaseException) -> None:
        """When training raises; the error is re-raised afterwards."""

    def state_dict(self) -> dict[str, Any]:
        """State to save in checkpoints."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""
