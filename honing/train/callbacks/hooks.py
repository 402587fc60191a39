"""Which callback methods an event calls, and with what: honing's own names, OLMo-core's and VeOmni's.

The Trainer emits each event once under honing's name (``on_step_end``). A callback may implement it under that
name or OLMo-core's (``post_step``; honing's wins when a callback has both). VeOmni's events
(``on_step_end(self, state, **kwargs)``) get the trainer as ``state`` plus the event's keyword arguments when the
method takes parameters. Existing honing callbacks (methods without parameters) are called as before.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

#: honing's event → OLMo-core's name for the same moment (same arguments, except ``pre_step``, which receives
#: the batch as OLMo-core passes it)
OLMO_CORE_NAMES: dict[str, tuple[str, ...]] = {
    "on_train_begin": ("pre_train",),
    "on_epoch_begin": ("pre_epoch",),
    "on_step_begin": ("pre_step",),
    "on_step_end": ("post_step",),
    "on_epoch_end": ("post_epoch",),
    "on_train_end": ("post_train",),
    "on_log": ("log_metrics",),
    "on_checkpoint_saved": ("post_checkpoint_saved",),
}

#: VeOmni's events: a method with parameters is called as ``method(state, **kwargs)``
VEOMNI_EVENTS = frozenset(
    {"on_train_begin", "on_epoch_begin", "on_step_begin", "on_step_end", "on_epoch_end", "on_train_end"}
)


class Hook:
    """One callback method bound to one event: called as the Trainer emits the event (positional arguments for
    honing's events, keywords for VeOmni's), passing on what the method's own form takes."""

    def __init__(self, method: Callable[..., Any], event: str, name: str, state: Any):
        self.__self__ = getattr(method, "__self__", None)  # the callback, as for a bound method
        self.method = method
        self.state = state
        self.accepted: set[str] | None = None  # VeOmni's form without **kwargs: only the keywords it names
        if name == "pre_step":  # OLMo-core's pre_step(batch)
            self.form = "batch"
        elif event not in VEOMNI_EVENTS:
            self.form = "positional"
        else:
            parameters = inspect.signature(method).parameters
            self.form = "veomni" if parameters else "positional"
            if parameters and not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
                self.accepted = set(list(parameters)[1:])

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        if self.form == "positional":
            self.method(*args)
        elif self.form == "batch":
            self.method(kwargs.get("micro_batches"))
        elif self.accepted is None:
            self.method(self.state, **kwargs)
        else:
            self.method(self.state, **{key: value for key, value in kwargs.items() if key in self.accepted})


def overrides(callback: Any, name: str, base: type) -> bool:
    """True when ``callback`` implements ``name`` itself rather than inheriting ``base``'s no-op."""
    method = getattr(callback, name, None)
    if method is None:
        return False
    inherited = getattr(base, name, None)
    return getattr(method, "__func__", method) is not inherited


def handlers(callback: Any, event: str, base: type, state: Any) -> list[Hook]:
    """The method ``callback`` runs for ``event``, wrapped to take the event's arguments as the Trainer emits
    them: honing's name when the callback implements it (then a method under OLMo-core's name is its own
    business, e.g. the trackers' ``log_metrics``), else OLMo-core's."""
    for name in (event, *OLMO_CORE_NAMES.get(event, ())):
        if overrides(callback, name, base):
            return [Hook(getattr(callback, name), event, name, state)]
    return []
