"""OLMo-core's Python names for building a trainer, at honing's edge: a script written for ``olmo_core.train``,

    TrainerConfig(save_folder=..., work_dir=..., max_duration=..., checkpointer=CheckpointerConfig(...))
        .with_callback(name, callback).build(train_module, data_loader).fit()

runs on honing. ``build`` makes OLMo-core's ``Trainer`` (``olmo_core_trainer.py``: the document's constructor over
the ``Trainer`` a recipe makes, with the document's checkpoint-loading meaning), with callbacks written under
OLMo-core's event names adapted to honing's and, as OLMo-core's trainer does, a console, checkpointer, speed monitor
and garbage collector unless the config has its own
(``olmo_core_defaults.py``). Fields and defaults follow OLMo-core's document; where honing's differ,
docs/coming-from.md says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch
import torch.distributed as dist

from honing.distributed import prepare_training_environment, teardown_training_environment
from honing.errors import ConfigError
from honing.interop.olmo_core_evals import recommended_eval_callbacks
from honing.interop.olmo_core_trainer import Checkpointer, OLMoCoreTrainerSection, Trainer, olmo_core_section
from honing.interop.olmo_core_unshard import unshard_checkpoint
from honing.train.callbacks.base import Callback
from honing.train.common import LoadStrategy, StepSkipRange, StrEnum
from honing.train.duration import Duration, DurationUnit
from honing.train.metrics import MetricMergeStrategy, ReduceType
from honing.train.train_module import TrainModule

# every name of ``olmo_core.train``: a script's ``from olmo_core.train import ...`` becomes this module's
__all__ = [
    "Callback",
    "Checkpointer",
    "CheckpointerConfig",
    "Duration",
    "DurationUnit",
    "LoadStrategy",
    "LogFilterType",
    "MetricMergeStrategy",
    "OLMoCoreTrainerSection",
    "ReduceType",
    "StepSkipRange",
    "Trainer",
    "TrainerConfig",
    "prepare_training_environment",
    "teardown_training_environment",
    "unshard_checkpoint",  # olmo_core.distributed.checkpoint's, named by the Trainer's checkpointer field
]


class LogFilterType(StrEnum):
    """Which ranks log below WARNING (OLMo-core's, for ``prepare_training_environment(log_filter_type=...)``)."""

    rank0_only = "rank0_only"
    local_rank0_only = "local_rank0_only"
    all_ranks = "all_ranks"


@dataclass
class CheckpointerConfig:
    """How checkpoints are written and read (OLMo-core's ``CheckpointerConfig``).

    ``work_dir``: where a remote save folder's checkpoints are written before upload and remote checkpoints are
    fetched to (None: the trainer's ``work_dir``, else the cache); ``save_overwrite`` None takes the trainer's;
    ``pre_download``: a remote checkpoint is copied to a local folder before it is read; ``save_thread_count``:
    the threads DCP writes each rank's files with; ``load_thread_count``: the threads that fetch a remote
    checkpoint's files (setting it fetches them first, as ``pre_download``; DCP reads local files with one
    thread per rank); ``throttle_uploads``: honing's uploads are always one file at a time from rank 0's
    background thread, so either value gets that."""

    work_dir: str | None = None
    save_overwrite: bool | None = None
    pre_download: bool = False
    save_thread_count: int | None = None
    load_thread_count: int | None = None
    throttle_uploads: bool = False

    def build(
        self,
        *,
        process_group: dist.ProcessGroup | None = None,
        save_overwrite: bool = False,
        work_dir: str | None = None,
    ) -> Checkpointer:
        """The Checkpointer these settings describe (the trainer's ``save_overwrite`` / ``work_dir`` fill gaps)."""
        return Checkpointer(
            self.work_dir or work_dir,
            save_overwrite=save_overwrite if self.save_overwrite is None else self.save_overwrite,
            pre_download=self.pre_download,
            process_group=process_group,
            save_thread_count=self.save_thread_count,
            load_thread_count=self.load_thread_count,
            throttle_uploads=self.throttle_uploads,
        )


@dataclass
class TrainerConfig:
    """Everything the loop needs that is not the model, the loss or the data (OLMo-core's ``TrainerConfig``, its
    fields in its order). ``work_dir``: the local folder for working files, persisted to the save folder (None:
    the save folder, or a remote one's work folder); ``device`` (None: the train module's); ``async_bookkeeping``
    (None: True, honing always has a gloo group for it); ``cancel_check_interval`` is 1, not OLMo-core's 25
    (honing's check is an asynchronous all-reduce waited on a step later: checking every step costs the loop
    nothing and a SIGTERM stops the run within a step or two)."""

    save_folder: str
    work_dir: str | None = None
    load_path: str | None = None
    load_strategy: LoadStrategy | str = LoadStrategy.if_available
    load_optim_state: bool | None = None
    load_trainer_state: bool | None = None
    checkpointer: CheckpointerConfig = field(default_factory=CheckpointerConfig)
    device: str | torch.device | None = None
    save_overwrite: bool = False
    max_duration: Duration | str = field(default_factory=lambda: Duration.epochs(1))
    cancel_check_interval: int = 1
    hard_stop: Duration | str | None = None
    metrics_collect_interval: int = 5
    callbacks: dict[str, Callback] = field(default_factory=dict)
    async_bookkeeping: bool | None = None
    bookkeeping_soft_timeout: int = 30
    no_checkpoints: bool = False  # benchmarking: load and save no checkpoints
    no_evals: bool = False  # benchmarking: run no evaluator callbacks
    steps_to_skip: list[StepSkipRange] | None = None

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

    def with_recommended_evals(
        self,
        tokenizer: Any,
        sequence_length: int,
        cluster: str,
        task_set: str = "full",
        eval_interval: int = 10_000,
        lazy_load: bool = False,
    ) -> TrainerConfig:
        """A copy of this config with a ``downstream_evaluator`` (lm-eval on the task set's benchmarks) and an
        ``lm_evaluator`` (the loss on the validation documents of the folder ``cluster``): honing's nearest form of
        OLMo-core's, ``olmo_core_evals.py`` says what differs."""
        return self.with_callbacks(
            recommended_eval_callbacks(tokenizer, sequence_length, cluster, task_set, eval_interval, lazy_load)
        )

    def section(self) -> OLMoCoreTrainerSection:
        """These settings as honing's trainer section (the fields of the same name; durations as text)."""
        return olmo_core_section(
            **{
                item.name: getattr(self, item.name)
                for item in fields(self)
                if item.name in OLMoCoreTrainerSection.model_fields and item.name != "device"
            }
        )

    def build(
        self,
        train_module: TrainModule,
        data_loader: Any,
        *,
        dp_process_group: dist.ProcessGroup | None = None,
        checkpointer_pg: dist.ProcessGroup | None = None,
    ) -> Trainer:
        """Create the Trainer for this train module and data loader: ``checkpointer_pg`` is the group checkpoints
        are written and read with (None: a gloo group of every rank for asynchronous saves, else the default
        group); ``dp_process_group`` None is every rank (a smaller group is refused)."""
        return Trainer(
            work_dir=self.work_dir,
            train_module=train_module,
            data_loader=data_loader,
            device=self.device,
            save_folder=self.save_folder,
            checkpointer=self.checkpointer.build(
                process_group=checkpointer_pg, save_overwrite=self.save_overwrite, work_dir=self.work_dir
            ),
            callbacks=self.callbacks,
            max_duration=self.max_duration,
            save_overwrite=self.save_overwrite,
            load_path=self.load_path,
            load_strategy=self.load_strategy,
            load_trainer_state=self.load_trainer_state,
            load_optim_state=self.load_optim_state,
            metrics_collect_interval=self.metrics_collect_interval,
            dp_process_group=dp_process_group,
            cancel_check_interval=self.cancel_check_interval,
            hard_stop=self.hard_stop,
            async_bookkeeping=self.async_bookkeeping,
            bookkeeping_soft_timeout=self.bookkeeping_soft_timeout,
            no_checkpoints=self.no_checkpoints,
            no_evals=self.no_evals,
            steps_to_skip=self.steps_to_skip,
        )
