"""OLMo-core's Python names for building a trainer, at honing's edge: a script written for ``olmo_core.train``,

    TrainerConfig(save_folder=..., max_duration=..., checkpointer=CheckpointerConfig(...))
        .with_callback(name, callback).build(train_module, data_loader).fit()

runs on honing. ``build`` turns the dataclass into honing's ``TrainerSection`` and ``StorageSection`` and makes the
same ``Trainer`` a recipe makes, with callbacks written under OLMo-core's event names adapted to honing's.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from honing.config.schema import StorageSection, TrainerSection
from honing.errors import ConfigError
from honing.interop.callback_names import with_honing_event_names
from honing.train.callbacks.base import Callback
from honing.train.checkpoint import Checkpointer
from honing.train.common import LoadStrategy, StepSkipRange
from honing.train.duration import Duration
from honing.train.remote import Uploader
from honing.train.train_module import TrainModule
from honing.train.trainer import Trainer


class OLMoCoreTrainerSection(TrainerSection):
    """honing's trainer section with OLMo-core's default for ``load_trainer_state``."""

    load_trainer_state: bool | None = None
    """None (OLMo-core's default): a checkpoint's trainer state is loaded when it has one."""


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

    def build(self, *, save_overwrite: bool = False, work_dir: str | None = None) -> Checkpointer:
        """The Checkpointer these settings describe (the trainer's ``save_overwrite`` / ``work_dir`` fill gaps)."""
        for name in ("pre_download", "save_thread_count", "load_thread_count", "throttle_uploads"):
            if getattr(self, name) not in (None, False):
                raise ConfigError(
                    f"CheckpointerConfig.{name}: not supported by honing (checkpoints are written by DCP, one "
                    "writer per rank, and uploaded in the background); remove it"
                )
        storage = StorageSection(work_folder=self.work_dir or work_dir)
        return Checkpointer(
            save_overwrite=save_overwrite if self.save_overwrite is None else self.save_overwrite,
            uploader=Uploader(storage),
            storage=storage,
        )


@dataclass
class TrainerConfig:
    """Everything the loop needs that is not the model, the loss or the data (OLMo-core's ``TrainerConfig``)."""

    save_folder: str
    max_duration: Duration | str
    work_dir: str | None = None  # where a remote save folder is written before upload (None: the cache)
    load_path: str | None = None
    load_strategy: LoadStrategy | str = LoadStrategy.if_available
    load_trainer_state: bool | None = None
    load_optim_state: bool | None = None
    hard_stop: Duration | str | None = None
    metrics_collect_interval: int = 10
    cancel_check_interval: int = 1
    steps_to_skip: list[StepSkipRange] = field(default_factory=list)
    save_overwrite: bool = False
    callbacks: dict[str, Callback] = field(default_factory=dict)
    no_checkpoints: bool = False  # benchmarking: load and save no checkpoints
    no_evals: bool = False  # benchmarking: run no evaluator callbacks
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

    def section(self) -> OLMoCoreTrainerSection:
        """These settings as honing's trainer section (the fields of the same name; durations as text)."""
        values: dict[str, Any] = {
            item.name: getattr(self, item.name)
            for item in fields(self)
            if item.name in OLMoCoreTrainerSection.model_fields
        }
        for name in ("max_duration", "hard_stop"):
            if isinstance(values[name], Duration):
                values[name] = str(values[name])
        values["load_strategy"] = LoadStrategy(values["load_strategy"]).value
        values["steps_to_skip"] = [{"start": skip.start, "stop": skip.stop} for skip in values["steps_to_skip"]]
        return OLMoCoreTrainerSection(**values)

    def build(self, train_module: TrainModule, data_loader: Any) -> Trainer:
        """Create the Trainer for this train module and data loader."""
        section = self.section()
        trainer = Trainer(
            section,
            train_module=train_module,
            data_loader=data_loader,
            callbacks=dict(self.callbacks),
            checkpointer=self.checkpointer.build(save_overwrite=section.save_overwrite, work_dir=self.work_dir),
            callback_adapter=with_honing_event_names,
        )
        trainer.no_checkpoints, trainer.no_evals = self.no_checkpoints, self.no_evals
        return trainer
