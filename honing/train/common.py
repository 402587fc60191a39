"""Small value types shared by the trainer, its config and the recipes (OLMo-core's ``train/common.py``);
``Duration`` has its own module, ``duration.py``."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class StrEnum(str, Enum):
    """An enum of strings whose ``str()`` and ``format()`` are the value, as Python 3.11's ``enum.StrEnum`` (3.10
    has none): ``str(DurationUnit.steps) == "steps"``."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class LoadStrategy(StrEnum):
    """Whether ``fit`` loads a checkpoint first."""

    if_available = "if_available"
    always = "always"
    never = "never"


@dataclass(frozen=True)
class StepSkipRange:
    """Steps ``start <= step < stop``: their batches are consumed but not trained on."""

    start: int
    stop: int

    def __contains__(self, step: int) -> bool:
        return self.start <= step < self.stop
