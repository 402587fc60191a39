"""How long to train: a number of steps, epochs or tokens."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from honing.errors import ConfigError
from honing.train.common import StrEnum

CHINCHILLA_TOKENS_PER_PARAM = 20  # Hoffmann et al. 2022: compute-optimal ≈ 20 tokens per parameter


class DurationUnit(StrEnum):
    """The unit a Duration counts in."""

    steps = "steps"
    epochs = "epochs"
    tokens = "tokens"


@dataclass(frozen=True)
class Duration:
    """A training length, e.g. ``Duration.steps(200)`` or ``Duration.parse("5e6tokens")``; epochs may be a fraction
    (``0.5epochs``), steps and tokens are whole."""

    value: int | float
    unit: DurationUnit

    @classmethod
    def steps(cls, steps: int) -> Duration:
        """A duration of ``steps`` optimizer steps."""
        return cls(int(steps), DurationUnit.steps)

    @classmethod
    def epochs(cls, epochs: float) -> Duration:
        """A duration of ``epochs`` passes over the training data (``0.5``: half of one)."""
        if epochs <= 0:
            raise ConfigError(f"invalid duration {epochs}epochs: give a positive number of epochs")
        return cls(int(epochs) if epochs == int(epochs) else float(epochs), DurationUnit.epochs)

    @classmethod
    def tokens(cls, tokens: int) -> Duration:
        """A duration of ``tokens`` training tokens (summed over all ranks)."""
        return cls(int(tokens), DurationUnit.tokens)

    @classmethod
    def chinchilla_tokens(cls, multiple: float, *, model_params: int) -> Duration:
        """``multiple`` × the compute-optimal token count, 20 tokens per parameter, where ``model_params``
        counts the active non-embedding parameters, as OLMo-core's scripts pass
        (``count_parameters(model, non_embedding=True)``)."""
        if model_params <= 0:
            raise ConfigError(f"a chinchilla duration needs a positive parameter count, got {model_params}")
        return cls.tokens(int(multiple * CHINCHILLA_TOKENS_PER_PARAM * model_params))

    @classmethod
    def parse(cls, text: str | int | Duration, *, model_params: int | None = None) -> Duration:
        """Parse ``"200steps"``, ``"2epochs"`` (or ``"0.5epochs"``), ``"5e6tokens"`` or ``"1chinchilla"`` (needs
        model_params, the active non-embedding parameter count)."""
        if isinstance(text, Duration):
            return text
        if isinstance(text, int):
            return cls.steps(text)
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?(?:[eE]\d+)?)\s*([a-z_]+)\s*", str(text))
        units = {
            "step": "steps",
            "steps": "steps",
            "epoch": "epochs",
            "epochs": "epochs",
            "token": "tokens",
            "tokens": "tokens",
            "chinchilla": "chinchilla",
        }
        if re.fullmatch(r"\s*\d+(?:\.\d+)?(?:[eE]\d+)?\s*", str(text)):
            number = str(text).strip()
            raise ConfigError(f"invalid duration {text!r}: give its unit, e.g. '{number}steps' (or epochs, tokens)")
        if not match or match.group(2) not in units:
            raise ConfigError(
                f"invalid duration {text!r}: expected e.g. '200steps', '2epochs', '5e6tokens' or '1chinchilla'"
            )
        number, unit = float(match.group(1)), units[match.group(2)]
        if unit == "chinchilla":
            if model_params is None:
                raise ConfigError(f"duration {text!r} needs the model's active non-embedding parameter count")
            return cls.chinchilla_tokens(number, model_params=model_params)
        if unit == "epochs":
            return cls.epochs(number)
        if number != math.floor(number):
            raise ConfigError(f"invalid duration {text!r}: {unit} must be a whole number")
        return cls(int(number), DurationUnit(unit))

    def epoch_steps(self, steps_per_epoch: int) -> int:
        """The steps an epoch duration lasts: ``ceil(epochs x steps_per_epoch)``, transformers' Trainer's
        ``max_steps`` for a fractional ``num_train_epochs`` (0.5 of 7 steps: 4)."""
        return math.ceil(self.value * steps_per_epoch)

    def due(self, *, step: int, tokens: int, epoch: int, steps_per_epoch: int | None = None) -> bool:
        """True once training has reached this duration (``epoch`` counts completed epochs + 1; a fractional epoch
        duration counts steps, so it needs ``steps_per_epoch``)."""
        if self.unit == DurationUnit.steps:
            return step >= self.value
        if self.unit == DurationUnit.tokens:
            return tokens >= self.value
        if isinstance(self.value, float):
            if steps_per_epoch is None:
                raise ConfigError(
                    f"trainer.max_duration {self}: a fraction of an epoch needs the steps of an epoch, which this data "
                    "loader cannot tell ahead of time; give the duration in steps or whole epochs"
                )
            return step >= self.epoch_steps(steps_per_epoch)
        return epoch > self.value

    def __str__(self) -> str:
        return f"{self.value}{self.unit.value}"
