"""TrainerConfig and the small value types it is built from."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from honing.train.callbacks.base import Callback
from honing.train.duration import Duration

if TYPE_CHECKING:
    from honing.train.train_module import TrainModule
    from honing.train.trainer import Trainer


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


@dataclass
class TrainerConfig:
    """Everything the loop needs that is not the model, the loss or the data."""

    save_folder: str
    max_duration: Duration | str
    load_path: str | None = None
    load_strategy: LoadStrategy | str = LoadStrategy.if_available
    hard_stop: Duration | str | None = None
    metrics_collect_interval: int = 10
    cancel_check_interval: int = 10
    steps_to_skip: list[StepSkipRange] = field(default_factory=list)
    save_overwrite: bool = False
    callbacks: dict[str, Callback] = field(default_factory=dict)
    extra_checkpoint_files: dict[str, str | bytes] = field(default_factory=dict)
    model_params: int | None = None  # for "chinchilla" durations

    def build(self, train_module: "TrainModule", data_loader: Any) -> "Trainer":
        """Create the Trainer for this train module and data loader."""
        from honing.train.trainer import Trainer

        return Trainer(
            save_folder=self.save_folder,
            train_module=train_module,
            data_loader=data_loader,
            max_duration=Duration.parse(self.max_duration, model_params=self.model_params),
            hard_stop=Duration.parse(self.hard_stop, model_params=self.model_params) if self.hard_stop else None,
            load_path=self.load_path,
            load_strategy=LoadStrategy(self.load_strategy),
            metrics_collect_interval=self.metrics_collect_interval,
            cancel_check_interval=self.cancel_check_interval,
            steps_to_skip=list(self.steps_to_skip),
            save_overwrite=self.save_overwrite,
            callbacks=dict(self.callbacks),
            extra_checkpoint_files=dict(self.extra_checkpoint_files),
        )
