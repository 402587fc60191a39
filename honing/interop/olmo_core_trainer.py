"""OLMo-core's ``Trainer`` at honing's edge: the document's constructor (its fields, in its order, with its
defaults) over honing's ``Trainer``, and the document's meaning of ``load_trainer_state`` / ``load_optim_state``.

honing's own Trainer takes a ``TrainerSection`` and restores everything when it resumes from its save folder
(``load_trainer_state`` / ``load_optim_state`` are a warm start's, refused without ``load_path``, and an optimizer
state that is None follows the trainer state). OLMo-core's applies both settings to every load, the save folder's
too, and None means "when the checkpoint has it": ``OLMoCoreCheckpoints``, the facade's checkpoints collaborator,
gives that meaning, the core keeps its own.
"""

from __future__ import annotations

import logging
import os
from typing import Any, ClassVar

import torch
import torch.distributed as dist

from honing import storage
from honing.config.schema import StorageSection, TrainerSection
from honing.errors import CheckpointError
from honing.interop.callback_names import with_honing_event_names
from honing.interop.olmo_core_defaults import with_default_callbacks
from honing.train.callbacks.base import Callback
from honing.train.checkpoint import Checkpointer as HoningCheckpointer
from honing.train.checkpoint_io import MODEL_AND_OPTIM_DIR, TRAIN_DIR, has_optimizer_state
from honing.train.common import LoadStrategy, StepSkipRange
from honing.train.duration import Duration
from honing.train.remote import Uploader
from honing.train.train_module import TrainModule
from honing.train.trainer import Trainer as HoningTrainer
from honing.train.trainer_checkpoints import Checkpoints
from honing.train.trainer_delegates import Delegated
from honing.train.trainer_progress import DataLoaderLike

log = logging.getLogger(__name__)

UNSET = object()  # a keyword not given (None has a meaning of its own)


class Checkpointer(HoningCheckpointer):
    """Trainer checkpointer (OLMo-core's): the document's constructor, positional in its order, and ``load`` with
    its defaults (None: load what the checkpoint has; honing's own ``load`` loads both, an error when one is
    missing). A remote save folder's checkpoints are written under ``work_dir`` and uploaded in the background."""

    def __init__(
        self,
        work_dir: str | os.PathLike | None,
        save_overwrite: bool = False,
        pre_download: bool = False,
        process_group: dist.ProcessGroup | None = None,
        save_thread_count: int | None = None,
        load_thread_count: int | None = None,
        throttle_uploads: bool = False,
    ):
        storage_section = StorageSection(work_folder=None if work_dir is None else str(work_dir))
        super().__init__(
            process_group=process_group,
            save_overwrite=save_overwrite,
            uploader=Uploader(storage_section),
            storage=storage_section,
            pre_download=pre_download,
            save_thread_count=save_thread_count,
            load_thread_count=load_thread_count,
            throttle_uploads=throttle_uploads,
        )

    def load(
        self,
        dir: str | os.PathLike,
        train_module: TrainModule,
        *,
        load_trainer_state: bool | None = None,
        load_optim_state: bool | None = None,
        this_process_only: bool = False,
        load_optimizer_state: bool | None | object = UNSET,
    ) -> dict[str, Any] | None:
        """Load model, optim, and other training state from a checkpoint directory; None for either: when the
        checkpoint has it (``load_optimizer_state``: honing's name, as the Trainer passes it)."""
        return super().load(
            str(dir),
            train_module,
            load_optimizer_state=load_optim_state if load_optimizer_state is UNSET else load_optimizer_state,
            load_trainer_state=load_trainer_state,
            this_process_only=this_process_only,
        )


class OLMoCoreTrainerSection(TrainerSection):
    """honing's trainer section with OLMo-core's meaning of ``load_trainer_state`` / ``load_optim_state``."""

    # OLMo-core applies both to every load (the save folder's too), so they need no load_path
    LOAD_SETTINGS_APPLY_TO_RESUME: ClassVar[bool] = True

    load_trainer_state: bool | None = None
    """None (OLMo-core's default): a checkpoint's trainer state is loaded when it has one."""
    load_optim_state: bool | None = None
    """None (OLMo-core's default): a checkpoint's optimizer state is loaded when it has one."""


def olmo_core_section(**settings: Any) -> OLMoCoreTrainerSection:
    """The trainer section of OLMo-core's settings (durations and ``StepSkipRange`` objects as honing writes them)."""
    for name in ("max_duration", "hard_stop"):
        if isinstance(settings.get(name), Duration):
            settings[name] = str(settings[name])
    settings["load_strategy"] = LoadStrategy(settings.get("load_strategy", LoadStrategy.if_available)).value
    skips = settings.get("steps_to_skip") or []
    settings["steps_to_skip"] = [{"start": skip.start, "stop": skip.stop} for skip in skips]
    return OLMoCoreTrainerSection(**settings)


class OLMoCoreCheckpoints(Checkpoints):
    """The Trainer's checkpoints with OLMo-core's loads: the document's parameter names, and ``load_trainer_state`` /
    ``load_optim_state`` applied to every load, None meaning "when the checkpoint has it"."""

    def load(
        self, dir: str | os.PathLike, *, load_trainer_state: bool | None = None, load_optim_state: bool | None = None
    ) -> None:
        """Load a checkpoint, or the newest of a folder of them. None takes the trainer's setting; a setting that is
        None too loads that state when the checkpoint has it (OLMo-core's meaning, for the optimizer as well)."""
        path = str(dir)
        if not HoningCheckpointer.dir_is_checkpoint(path):
            path = self.checkpointer.latest_checkpoint(path)  # FileNotFoundError when the folder holds none
        load_trainer_state = self.config.load_trainer_state if load_trainer_state is None else load_trainer_state
        load_optim_state = self.config.load_optim_state if load_optim_state is None else load_optim_state
        if load_trainer_state is None:
            load_trainer_state = storage.exists(storage.join(path, TRAIN_DIR, "rank0.pt"))
        if load_optim_state is None:
            load_optim_state = has_optimizer_state(storage.join(path, MODEL_AND_OPTIM_DIR))
        super().load(path, load_trainer_state=load_trainer_state, load_optim_state=load_optim_state)

    def maybe_load(
        self,
        dir: str | os.PathLike | None = None,
        *,
        load_trainer_state: bool | None = None,
        load_optim_state: bool | None = None,
    ) -> bool:
        """Like ``load_checkpoint``, but nothing happens when ``dir`` (default: the save folder) holds no checkpoint
        (the newest that loads, an older one when it is corrupt). Returns whether one was loaded."""
        return super().maybe_load(
            None if dir is None else str(dir), load_trainer_state=load_trainer_state, load_optim_state=load_optim_state
        )

    def load_at_start(self) -> None:
        """OLMo-core's fit: the save folder, then load_path, each loaded with the trainer's settings (honing's own
        Trainer restores everything from its save folder whatever they say); a checkpoint loaded before fit is
        kept."""
        if self.load_strategy == LoadStrategy.never or self.loaded:
            return
        load_path = self.config.load_path
        for folder in (self.save_folder, load_path):
            if folder and self.maybe_load(folder):
                return
        if self.load_strategy == LoadStrategy.always:
            raise CheckpointError(
                f"load_strategy is 'always' but no loadable checkpoint was found in {self.save_folder!r}"
                + (f" or {load_path!r}" if load_path else "")
            )


class Trainer(HoningTrainer):
    """Language model trainer (OLMo-core's ``Trainer``), built directly with the document's signature or by
    ``TrainerConfig.build``. The document's private fields (``_metrics``, ``_canceled`` ...) are honing's own
    state and not arguments; ``callbacks`` get OLMo-core's default ones unless given (``olmo_core_defaults.py``)."""

    checkpoints_type: ClassVar[type[Checkpoints]] = OLMoCoreCheckpoints
    load_checkpoint = Delegated("checkpoints", OLMoCoreCheckpoints.load)
    maybe_load_checkpoint = Delegated("checkpoints", OLMoCoreCheckpoints.maybe_load)

    def __init__(
        self,
        work_dir: str | os.PathLike | None,
        train_module: TrainModule,
        data_loader: DataLoaderLike,
        device: torch.device | str | None,
        save_folder: str,
        checkpointer: HoningCheckpointer,
        callbacks: dict[str, Callback],
        max_duration: Duration | str,
        save_overwrite: bool = False,
        load_path: str | None = None,
        load_strategy: LoadStrategy | str = LoadStrategy.if_available,
        load_trainer_state: bool | None = None,
        load_optim_state: bool | None = None,
        metrics_collect_interval: int = 5,
        dp_process_group: dist.ProcessGroup | None = None,
        global_step: int = 0,
        global_train_tokens_seen: int = 0,
        global_train_petaflops: float = 0.0,
        epoch: int = 1,
        cancel_check_interval: int = 25,
        hard_stop: Duration | str | None = None,
        async_bookkeeping: bool | None = None,
        bookkeeping_soft_timeout: int = 30,
        no_checkpoints: bool = False,
        no_evals: bool = False,
        steps_to_skip: list[StepSkipRange] | None = None,
    ):
        section = olmo_core_section(
            save_folder=str(save_folder),
            load_path=None if load_path is None else str(load_path),
            load_strategy=load_strategy,
            load_trainer_state=load_trainer_state,
            load_optim_state=load_optim_state,
            save_overwrite=save_overwrite,
            max_duration=max_duration,
            cancel_check_interval=cancel_check_interval,
            hard_stop=hard_stop,
            metrics_collect_interval=metrics_collect_interval,
            steps_to_skip=steps_to_skip,
        )
        super().__init__(
            section,
            train_module=train_module,
            data_loader=data_loader,
            callbacks=with_default_callbacks(callbacks, train_module),
            checkpointer=checkpointer,
            callback_adapter=with_honing_event_names,
            work_dir=None if work_dir is None else str(work_dir),
            device=device,
            dp_process_group=dp_process_group,
            async_bookkeeping=async_bookkeeping,
            bookkeeping_soft_timeout=bookkeeping_soft_timeout,
        )
        self.global_step, self.global_train_tokens_seen = global_step, global_train_tokens_seen
        self.global_train_petaflops, self.epoch = global_train_petaflops, epoch
        self.no_checkpoints, self.no_evals = no_checkpoints, no_evals

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load trainer state (not model or optimizer state)."""
        self.checkpoints.load_state_dict(state_dict)

    def has_callback(self, cb_class: type[Callback] | str) -> bool:
        """Whether a callback of this class (or registered under this name) is registered."""
        return super().has_callback(cb_class)
