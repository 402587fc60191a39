"""Callbacks written with OLMo-core's or VeOmni's event names, adapted once, when they are registered, to honing's.

The Trainer calls honing's event names only (``on_step_end()``, ``on_log(step, metrics)``, ...). A callback may
instead implement an event under OLMo-core's name (``post_step``; ``pre_step(batch)``) or in VeOmni's form
(``on_step_end(self, state, **kwargs)``: the trainer as ``state`` and the event's keyword arguments). The recipe
and OLMo-core's ``TrainerConfig`` hand ``with_honing_event_names`` to the Trainer, which passes every callback
it registers through it: a callback in honing's form comes back as it is; any other is wrapped in a
``ForeignNamedCallback`` whose honing-named methods call the callback's own.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from honing.train.callbacks.base import Callback

#: honing's event → OLMo-core's name for the same moment (same arguments, except ``pre_step``, which receives
#: the step's batch as OLMo-core passes it)
OLMO_CORE_NAMES: dict[str, str] = {
    "on_train_begin": "pre_train",
    "on_epoch_begin": "pre_epoch",
    "on_step_begin": "pre_step",
    "on_step_end": "post_step",
    "on_epoch_end": "post_epoch",
    "on_train_end": "post_train",
    "on_log": "log_metrics",
    "on_checkpoint_saved": "post_checkpoint_saved",
}


def micro_batches_of(trainer: Any) -> list[dict[str, Any]]:
    """The step's batch as the list of micro-batches its train module trains on, before they go to the device (as
    VeOmni's data loader yields them); a train module that does not cut micro-batches trains on one. Cut here for a
    callback, they are cut again by the train module (a VL collator's processor runs twice)."""
    module, batch = trainer.train_module, trainer.current_batch
    collator, size = getattr(module, "collator", None), getattr(module, "micro_batch_size", None)
    if collator is None or size is None or not isinstance(batch, dict):
        return [batch]
    return collator.split(batch, size)


def step_loss_dict(trainer: Any) -> dict[str, Any]:
    """VeOmni's ``loss_dict`` of the step: the parts of its loss the method recorded (``train/<part>_loss``, as
    ``aux_loss``); a next-token method's loss, which has no parts, as ``ce_loss`` (VeOmni's name), any other as
    ``loss``."""
    names = trainer.metrics.buffer.names_at(trainer.global_step)
    parts = {
        name.removeprefix("train/"): trainer.get_metric(name)
        for name in names
        if name.startswith("train/") and name != "train/loss" and name.endswith("loss")
    }
    if parts:
        return parts
    key = "ce_loss" if hasattr(trainer.train_module, "forward_loss") else "loss"
    return {key: trainer.get_metric("train/loss")}


#: VeOmni's events and the keyword arguments each passes after ``state``, read from the trainer when it is called
VEOMNI_KEYWORDS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "on_train_begin": lambda trainer: {},
    "on_epoch_begin": lambda trainer: {},
    "on_step_begin": lambda trainer: {"micro_batches": micro_batches_of(trainer)},
    # still tensors on the device: nothing syncs unless the callback reads them
    "on_step_end": lambda trainer: {
        "loss": trainer.get_metric("train/loss"),
        "loss_dict": step_loss_dict(trainer),
        "grad_norm": trainer.get_metric("optim/grad_norm"),
    },
    "on_epoch_end": lambda trainer: {},
    "on_train_end": lambda trainer: {},
}

#: every event the Trainer emits to callbacks (``post_attach`` is called by ``add_callback`` itself)
HONING_EVENTS = (
    "on_train_begin",
    "on_epoch_begin",
    "on_step_begin",
    "pre_optim_step",
    "post_train_batch",
    "on_step_end",
    "on_epoch_end",
    "on_train_end",
    "on_checkpoint_saved",
    "post_checkpoint_loaded",
    "on_log",
    "on_log_samples",
    "on_error",
)


def no_op_event(method: Callable[..., None]) -> Callable[..., None]:
    """Mark a base class's event method as doing nothing (VeOmni's ``Callback``), so that a callback inheriting it
    is not called for that event."""
    method.is_no_op_event = True  # type: ignore[attr-defined]
    return method


def _overrides(callback: Any, name: str) -> bool:
    """True when ``callback`` implements ``name`` itself rather than inheriting honing's (or VeOmni's) no-op."""
    method = getattr(callback, name, None)
    function = getattr(method, "__func__", method)
    return (
        method is not None and function is not getattr(Callback, name, None) and not hasattr(function, "is_no_op_event")
    )


def _veomni_form(method: Callable[..., Any]) -> bool:
    """A method under a VeOmni event's name that takes parameters (``state``, ...): honing's take none."""
    return bool(inspect.signature(method).parameters)


def _veomni_handler(method: Callable[..., Any], event: str, callback: ForeignNamedCallback) -> Callable[[], None]:
    """``method(state, **keywords)`` for VeOmni's ``event``, passing only the keywords the method names unless it
    takes ``**kwargs``."""
    parameters = inspect.signature(method).parameters
    keywords = VEOMNI_KEYWORDS[event]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return lambda: method(callback.trainer, **keywords(callback.trainer))
    accepted = set(list(parameters)[1:])
    return lambda: method(
        callback.trainer, **{key: value for key, value in keywords(callback.trainer).items() if key in accepted}
    )


def foreign_events(callback: Any) -> dict[str, tuple[str, Callable[..., Any]]]:
    """The events ``callback`` implements under another system's name or form: event → (form, its method), the
    form ``olmo_core`` or ``veomni``. honing's own name, in honing's form, wins when a callback has both (then a
    method under OLMo-core's name is the callback's own business, e.g. the trackers' ``log_metrics``)."""
    found: dict[str, tuple[str, Callable[..., Any]]] = {}
    for event in HONING_EVENTS:
        if _overrides(callback, event):
            if event in VEOMNI_KEYWORDS and _veomni_form(getattr(callback, event)):
                found[event] = ("veomni", getattr(callback, event))
        elif event in OLMO_CORE_NAMES and _overrides(callback, OLMO_CORE_NAMES[event]):
            found[event] = ("olmo_core", getattr(callback, OLMO_CORE_NAMES[event]))
    return found


class ForeignNamedCallback(Callback):
    """A callback written with OLMo-core's or VeOmni's event names, seen by the Trainer under honing's: each of
    honing's events it implements is an attribute set once here, so the Trainer calls it as any other callback's.
    Everything else (``priority``, state, attributes, ``isinstance``) is the wrapped callback's."""

    def __init__(self, callback: Callback):
        self.callback = callback
        foreign = foreign_events(callback)
        for event in HONING_EVENTS:
            if event in foreign:
                setattr(self, event, self._adapted(event, *foreign[event]))
            elif _overrides(callback, event):
                setattr(self, event, getattr(callback, event))

    def _adapted(self, event: str, form: str, method: Callable[..., Any]) -> Callable[..., None]:
        if form == "veomni":
            return _veomni_handler(method, event, self)
        if event == "on_step_begin":  # OLMo-core's pre_step(batch)
            return lambda: method(self.trainer.current_batch)
        return method

    @property
    def __class__(self) -> type:
        # isinstance(wrapper, TheirClass) holds (as for unittest.mock's spec), so has_callback and the trainer's
        # checks (a checkpointer under no_checkpoints, ...) see the wrapped callback
        return type(self.callback)

    @property
    def priority(self) -> int:
        """The wrapped callback's priority."""
        return self.callback.priority

    def attach(self, trainer: Any) -> None:
        """Attach the wrapper and the wrapped callback to ``trainer``."""
        Callback.attach(self, trainer)
        self.callback.attach(trainer)

    def post_attach(self) -> None:
        """The wrapped callback's ``post_attach``."""
        self.callback.post_attach()

    def state_dict(self) -> dict[str, Any]:
        """The wrapped callback's state."""
        return self.callback.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the wrapped callback's state."""
        self.callback.load_state_dict(state_dict)

    def __getattr__(self, name: str) -> Any:
        # only for names the wrapper lacks: the callback's own attributes and helpers
        callback = self.__dict__.get("callback")
        if callback is None:
            raise AttributeError(name)
        return getattr(callback, name)


def with_honing_event_names(callback: Callback) -> Callback:
    """``callback`` itself when it speaks honing's event names only, else a ``ForeignNamedCallback`` around it."""
    return ForeignNamedCallback(callback) if foreign_events(callback) else callback
