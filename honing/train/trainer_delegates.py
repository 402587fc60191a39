"""The Trainer's names that belong to one of its collaborators (``trainer.record_metric`` is
``trainer.metrics.record_metric``): OLMo-core's public names and the attributes callbacks read stay on the Trainer,
while the state and the code behind them live in the collaborator that owns them."""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Generic, TypeVar

T = TypeVar("T")


class Delegated(Generic[T]):
    """A method of the collaborator held in ``collaborator``: read on the class it is that collaborator class's
    function (so ``inspect.signature`` shows the real parameters); read on a trainer it is the collaborator's bound
    method, kept in the trainer's ``__dict__`` after the first read so calls on the hot path cost nothing more."""

    def __init__(self, collaborator: str, function: Callable[..., T]):
        self.collaborator = collaborator
        self.function = function
        self.__doc__ = function.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, trainer: object | None, owner: type | None = None) -> Callable[..., T]:
        if trainer is None:
            return self.function
        bound = getattr(getattr(trainer, self.collaborator), self.function.__name__)
        trainer.__dict__[self.name] = bound  # a non-data descriptor: the instance's entry wins from now on
        return bound


def delegated_value(path: str, *, settable: bool = False) -> property:
    """An attribute that is a collaborator's (``path``: ``"progress.global_step"``), read through a C-level getter;
    ``settable`` lets the trainer's name be assigned too (OLMo-core's fields are)."""
    owner, _, name = path.partition(".")
    getter = attrgetter(path)

    def set_value(trainer: object, value: object) -> None:
        setattr(getattr(trainer, owner), name, value)

    return property(getter, set_value if settable else None, doc=f"The trainer's ``{path}``.")
