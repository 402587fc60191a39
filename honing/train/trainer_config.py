"""TrainerConfig: the loop's settings (not the model, the loss or the data); ``build`` makes the Trainer."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from honing.errors import ConfigError
from honing.train.callbacks.base import Callback
from honing.train.checkpoint import Checkpointer
from honing.train.common import LoadStrategy, StepSkipRange
from honing.train.duration import Duration
from honing.train.train_module import TrainModule
from honing.train.trainer import Trainer


@dataclass
class CheckpointerConfig:
    """How checkpoints are written (OLMo-core's ``CheckpointerConfig``): ``work_dir`` is where a remote save
    folder's checkpoints are written before upload, ``save_overwrite`` None takes the trainer's. OLMo-core's
    thread-count, pre-download and throttling knobs have no meaning here (DCP writes with one thread per rank,
    uploads run in the background) and are refused when set."""

    work_dir: str | None = None
    save_overwrite: bool | None = None
    pre_download: bool = False
    save_thread_count: int | None = None
    load_thread_count: int | None = None
    throttle_uploads: bool = False

    def build(self, *, save_overwrite: bool = False, work_root: str | None = None) -> Checkpointer:
        """The Checkpointer these settings describe (the trainer's ``save_overwrite`` / ``work_root`` fill gaps)."""
        from honing.train.remote import Uploader

        for name in ("pre_download", "save_thread_count", "load_thread_count", "throttle_uploads"):
            if getattr(self, name) not in (None, False):
                raise ConfigError(
                    f"CheckpointerConfig.{name}: not supported by honing (checkpoints are written by DCP, one "
                    "writer per rank, and uploaded in the background); remove it"
                )
        return Checkpointer(
            save_overwrite=save_overwrite if self.save_overwrite is None else self.save_overwrite,
            uploader=Uploader(),
            work_root=self.work_dir or work_root,
        )


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
    load_trainer_state: bool | None = None  # None: loaded when the checkpoint has it (OLMo-core)
    load_optim_state: bool | None = None
    hard_stop: Duration | str | None = None
    metrics_collect_interval: int = 10
    # a cancel (SIGTERM, Ctrl-C) is exchanged between ranks asynchronously every this many steps: at 1, every
    # rank stops at most one step after the one the request arrived in
    cancel_check_interval: int = 1
    steps_to_skip: list[StepSkipRange] = field(default_factory=list)
    save_overwrite: bool = False
    callbacks: dict[str, Callback] = field(default_factory=dict)
    extra_checkpoint_files: dict[str, str | bytes] = field(default_factory=dict)
    model_params: int | None = None  # for "chinchilla" durations: active non-embedding parameters
    no_checkpoints: bool = False  # benchmarking: load and save no checkpoints
    no_evals: bool = False  # benchmarking: run no evaluator callbacks
    work_root: str | None = None  # where work folders of remote folders go (None: $HONING_CACHE_DIR/work)
    nonfinite_loss: str = "stop"  # a NaN / inf train/loss: "stop" the run, or "skip" (the train module skips)
    checkpointer: CheckpointerConfig = field(default_factory=CheckpointerConfig)

    def add_callback(self, name: str, callback: Callback) -> None:
        """Add a callback under ``name`` (unique), in place."""
        if name in self.callbacks:
            raise ConfigError(f"a callback named {name!r} is already in this TrainerConfig; choose another name")
        self.callbacks[name] = callback

    def add_callbacks(self, callbacks: dict[str, Callback]) -> None:
        """Add several callbacks by name, in place."""
        for name, callback in callbacks.items():
            self.add_callback(name, callback)

    def with_callback(self, name: str, callback: Callback) -> TrainerConfig:
        """A copy of this config with one more callback (this one is unchanged)."""
        return self.with_callbacks({name: callback})

    def with_callbacks(self, callbacks: dict[str, Callback]) -> TrainerConfig:
        """A copy of this config with more callbacks (this one is unchanged)."""
        config = replace(self, callbacks=dict(self.callbacks))
        config.add_callbacks(callbacks)
        return config

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
            checkpointer=self.checkpointer.build(save_overwrite=self.save_overwrite, work_root=self.work_root),
        )
