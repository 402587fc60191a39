"""TrainerConfig: the loop's settings (not the model, the loss or the data); ``build`` makes the Trainer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from honing.train.callbacks.base import Callback
from honing.train.common import LoadStrategy, StepSkipRange
from honing.train.duration import Duration
from honing.train.train_module import TrainModule
from honing.train.trainer import Trainer


@dataclass
class TrainerConfig:
    """Everything the loop needs that is not the model, the loss or the data."""

    save_folder: str
    max_duration: Duration | str
    load_path: str | None = None
    load_strategy: LoadStrategy | str = LoadStrategy.if_available
    # load_path's checkpoint is a warm start with load_trainer_state False: its weights, this run's step, data
    # position, RNG and callback states. load_optim_state None: the optimizer (and LR scheduler state) is
    # loaded with the trainer state; True / False: loaded / fresh either way. The save folder's own
    # checkpoints always restore everything.
    load_trainer_state: bool = True
    load_optim_state: bool | None = None
    hard_stop: Duration | str | None = None
    metrics_collect_interval: int = 10
    cancel_check_interval: int = 10
    steps_to_skip: list[StepSkipRange] = field(default_factory=list)
    save_overwrite: bool = False
    callbacks: dict[str, Callback] = field(default_factory=dict)
    extra_checkpoint_files: dict[str, str | bytes] = field(default_factory=dict)
    model_params: int | None = None  # for "chinchilla" durations: active non-embedding parameters
    no_checkpoints: bool = False  # benchmarking: load and save no checkpoints
    no_evals: bool = False  # benchmarking: run no evaluator callbacks
    work_root: str | None = None  # where work folders of remote folders go (None: $HONING_CACHE_DIR/work)
    nonfinite_loss: str = "stop"  # a NaN / inf train/loss: "stop" the run, or "skip" (the train module skips)

    def build(self, train_module: TrainModule, data_loader: Any) -> Trainer:
        """Create the Trainer for this train module and data loader."""
        return Trainer(
            save_folder=self.save_folder,
            train_module=train_module,
            data_loader=data_loader,
            max_duration=Duration.parse(self.max_duration, model_params=self.model_params),
            hard_stop=Duration.parse(self.hard_stop, model_params=self.model_params) if self.hard_stop else None,
            load_path=self.load_path,
            load_strategy=LoadStrategy(self.load_strategy),
            load_trainer_state=self.load_trainer_state,
            load_optim_state=self.load_optim_state,
            no_checkpoints=self.no_checkpoints,
            no_evals=self.no_evals,
            work_root=self.work_root,
            metrics_collect_interval=self.metrics_collect_interval,
            cancel_check_interval=self.cancel_check_interval,
            steps_to_skip=list(self.steps_to_skip),
            save_overwrite=self.save_overwrite,
            callbacks=dict(self.callbacks),
            extra_checkpoint_files=dict(self.extra_checkpoint_files),
            nonfinite_loss=self.nonfinite_loss,
        )
