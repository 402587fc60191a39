"""VeOmni's callbacks: ``Callback(trainer)``, ``trainer.add_callback(MyCallback(trainer))`` and
``self.callbacks.call(event, state, **kwargs)``.

A ``BaseTrainer`` recipe (``honing.interop.veomni``) keeps the callbacks added to it in VeOmni's form in a
``CallbackHandler``, as VeOmni's trainer does: its ``train_step`` calls their ``on_step_begin(state,
micro_batches=[...])`` and ``on_step_end(state, loss=..., loss_dict=..., grad_norm=...)``; honing's loop calls their
train and epoch events through ``LoopEvents``, a callback of honing's own registered with the run's Trainer. The
run's other callbacks (console, checkpoints, evaluation, ...) are the Trainer's, called by its loop as always, so
every callback gets each event once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from honing.interop.callback_names import foreign_events, no_op_event
from honing.train.callbacks.base import Callback as HoningCallback

if TYPE_CHECKING:
    from honing.interop.veomni_step import LRScheduler

#: the events honing's loop leaves to a recipe's own step (``Trainer.step_runner``): its ``train_step`` emits them
#: through ``self.callbacks.call`` so that the run's honing-form callbacks (OLMo-core's ``pre_optim_step``) get them
STEP_EVENTS = ("pre_optim_step",)


class Callback(HoningCallback):
    """VeOmni's ``Callback``: built with the trainer it serves (``MyCallback(trainer)``, kept as ``self.trainer``);
    its events take ``state`` (``state.global_step``, ``state.epoch``) and keyword arguments."""

    def __init__(self, trainer: Any = None):
        self.trainer = trainer

    def attach(self, trainer: Any) -> None:
        """Registered with honing's Trainer directly: ``self.trainer`` stays the trainer it was built with."""
        if getattr(self, "trainer", None) is None:
            self.trainer = trainer

    @no_op_event
    def on_train_begin(self, state: Any = None, **kwargs: Any) -> None:
        """Before the first step."""

    @no_op_event
    def on_epoch_begin(self, state: Any = None, **kwargs: Any) -> None:
        """At the start of each epoch."""

    @no_op_event
    def on_step_begin(
        self, state: Any = None, micro_batches: list[dict[str, Any]] | None = None, **kwargs: Any
    ) -> None:
        """Before a step, with its micro-batches (on the host, before ``preforward``)."""

    @no_op_event
    def on_step_end(self, state: Any = None, **kwargs: Any) -> None:
        """After a step: ``loss``, ``loss_dict`` and ``grad_norm`` (tensors: nothing waits unless they are read)."""

    @no_op_event
    def on_epoch_end(self, state: Any = None, **kwargs: Any) -> None:
        """After an epoch's last step."""

    @no_op_event
    def on_train_end(self, state: Any = None, **kwargs: Any) -> None:
        """After training."""


def in_veomni_form(callback: Any) -> bool:
    """Whether ``callback``'s events take VeOmni's ``(state, **kwargs)``: a ``Callback`` of this module, or one
    whose overridden events take parameters."""
    if isinstance(callback, Callback):
        return True
    return any(form == "veomni" for form, _ in foreign_events(callback).values())


class CallbackHandler:
    """VeOmni's ``self.callbacks``: the callbacks in VeOmni's form added to a trainer, called by ``call``."""

    def __init__(self, trainer: Any):
        self.trainer = trainer
        self.callbacks: list[Any] = []
        self.emit: Callable[[str], None] | None = None  # honing's Trainer's, for STEP_EVENTS (set each step)

    def add(self, callback: Any) -> None:
        """Keep ``callback``; one built without a trainer gets this one."""
        if getattr(callback, "trainer", None) is None:
            callback.trainer = self.trainer
        self.callbacks.append(callback)

    def call(self, event: str, state: Any, **kwargs: Any) -> None:
        """Every callback's ``event(state, **kwargs)`` that it implements; for ``STEP_EVENTS``, honing's
        callbacks of the run too."""
        if event in STEP_EVENTS and self.emit is not None:
            self.emit(event)
        for callback in self.callbacks:
            method = getattr(callback, event, None)
            function = getattr(method, "__func__", method)
            if method is None or hasattr(function, "is_no_op_event") or function is getattr(HoningCallback, event, 0):
                continue
            method(state, **kwargs)


class LoopEvents(HoningCallback):
    """honing's loop events, passed on to a ``BaseTrainer``'s VeOmni callbacks (train and epoch; the step's come
    from its ``train_step``); a step the loop skips (``trainer.steps_to_skip``) still moves the LR schedule on.
    Built from what it serves: the trainer's ``CallbackHandler`` and its LR scheduler, not the trainer itself."""

    def __init__(self, callbacks: CallbackHandler, lr_scheduler: LRScheduler):
        self.callbacks = callbacks
        self.lr_scheduler = lr_scheduler

    def on_train_begin(self) -> None:
        """The first step's LR (also a resumed run's), then the callbacks' ``on_train_begin``."""
        self.lr_scheduler.sync()
        self.callbacks.call("on_train_begin", self.trainer)

    def on_epoch_begin(self) -> None:
        """The callbacks' ``on_epoch_begin``."""
        self.callbacks.call("on_epoch_begin", self.trainer)

    def on_step_end(self) -> None:
        """After a skipped step, the next step's LR (``train_step`` sets it after the steps it trains)."""
        if self.trainer.step_skipped:
            self.lr_scheduler.sync()

    def on_epoch_end(self) -> None:
        """The callbacks' ``on_epoch_end``."""
        self.callbacks.call("on_epoch_end", self.trainer)

    def on_train_end(self) -> None:
        """The callbacks' ``on_train_end``."""
        self.callbacks.call("on_train_end", self.trainer)
