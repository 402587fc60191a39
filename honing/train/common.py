"""Small value types shared by the trainer, its config and the recipes (OLMo-core's ``train/common.py``);
``Duration`` has its own module, ``duration.py``."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class LoadStrategy(str, Enum):
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
