"""The training loop. It knows the TrainModule's methods, never which loss it trains."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch
import torch.distributed as dist

from honing.config.schema import StorageSection, TrainerSection
from honing.distributed import default_device, get_world_size, is_distributed, new_background_group
from honing.errors import ConfigError
from honing.train.callbacks.base import Callback
from honing.train.callbacks.checkpointer import CheckpointerCallback
from honing.train.callbacks.evaluator import EvaluatorCallback
from honing.train.callbacks.generation_eval import GenerationEvalCallback
from honing.train.callbacks.harness_eval import HarnessEvalCallback
from honing.train.checkpoint import Checkpointer
from honing.train.common import StepSkipRange
from honing.train.duration import Duration
from honing.train.metrics import MetricsBuffer
from honing.train.remote import Uploader
from honing.train.signals import GracefulStop
from honing.train.train_module import TrainModule
from honing.train.trainer_bookkeeping import TrainerBookkeeping
from honing.train.trainer_cancel import TrainerCancel
from honing.train.trainer_checkpoints import TrainerCheckpoints
from honing.train.trainer_files import TrainerFiles
from honing.train.trainer_metrics import TrainerMetrics
from honing.train.trainer_progress import TrainerProgress

log = logging.getLogger(__name__)


def _is_evaluator(callback: Callback) -> bool:
    """An evaluation callback: ``no_evals`` turns it off."""
    return isinstance(callback, (EvaluatorCallback, GenerationEvalCallback, HarnessEvalCallback))


def _implements(callback: Callback, event: str) -> bool:
    """True when ``callback`` does something at ``event``, rather than inheriting the base class's no-op."""
    method = getattr(callback, event)
    return getattr(method, "__func__", method) is not getattr(Callback, event)


def module_device(train_module: Any) -> torch.device | None:
    """The device ``train_module`` trains on: its ``device``, else its model's first parameter's (None: unknown)."""
    device = getattr(train_module, "device", None)
    if device is not None:
        return torch.device(device)
    model = getattr(train_module, "model", None)
    if isinstance(model, torch.nn.Module):
        for parameter in model.parameters():
            return parameter.device
    return None


class TrainerSetting:
    """A setting of the trainer section as an attribute of the Trainer (OLMo-core's Trainer fields): read from
    ``trainer.config``, and set by replacing the config with a copy holding the new value."""

    def __init__(self, doc: str):
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, trainer: Any, owner: type | None = None) -> Any:
        return self if trainer is None else getattr(trainer.config, self.name)

    def __set__(self, trainer: Any, value: Any) -> None:
        trainer.config = trainer.config.model_copy(update={self.name: value})


def check_warm_start(config: TrainerSection) -> None:
    """``load_trainer_state`` / ``load_optim_state`` say what ``load_path``'s checkpoint restores: set without it
    they would change nothing, so they are refused (one line naming the key). A section whose class says these
    settings apply to every load (``LOAD_SETTINGS_APPLY_TO_RESUME``) takes them without ``load_path``."""
    if getattr(type(config), "LOAD_SETTINGS_APPLY_TO_RESUME", False):
        return
    for key in ("load_trainer_state", "load_optim_state"):
        if config.load_path is None and getattr(config, key) != type(config).model_fields[key].default:
            raise ConfigError(
                f"trainer.{key}: says what the checkpoint of trainer.load_path restores, and trainer.load_path is "
                f"not set; set it, or remove trainer.{key}"
            )


class Trainer(TrainerCancel, TrainerCheckpoints, TrainerMetrics, TrainerBookkeeping, TrainerFiles, TrainerProgress):
    """Runs ``fit()``: load a checkpoint, then step until the duration, a hard stop or a cancel.

    It takes its settings as the config's ``trainer`` section (``storage`` says how a remote save folder is
    written and uploaded); the rest are the run's parts: the train module, the data loader, the callbacks, the
    files every checkpoint holds (``extra_checkpoint_files``) and ``model_params`` for "chinchilla" durations.
    ``callback_adapter`` sees every callback as it is registered (the recipe's adapts other systems' event
    names, ``honing.interop.callback_names``); the trainer itself calls honing's event names only.

    OLMo-core's Trainer fields that are not settings of the section: ``work_dir`` (the local folder for working
    files; default: the save folder, or a remote one's work folder), ``device`` (default: the train module's),
    ``dp_process_group`` (None: every rank; a smaller group is refused), ``async_bookkeeping`` (None: True) and
    ``bookkeeping_soft_timeout`` (seconds a bookkeeping op may take before a warning)."""

    metrics_collect_interval = TrainerSetting("How often (in steps) metrics are collected, reduced and logged.")
    load_path = TrainerSetting("A checkpoint, or a folder of them, to start from when the save folder has none.")
    load_trainer_state = TrainerSetting("Whether ``load_path``'s trainer state is loaded (None: when it has one).")
    load_optim_state = TrainerSetting("Whether ``load_path``'s optimizer state is loaded (None: when it has one).")

    def __init__(
        self,
        config: TrainerSection,
        *,
        train_module: TrainModule,
        data_loader: Any,
        callbacks: dict[str, Callback] | None = None,
        extra_checkpoint_files: dict[str, str | bytes] | None = None,
        model_params: int | None = None,
        storage: StorageSection | None = None,
        checkpointer: Checkpointer | None = None,
        callback_adapter: Callable[[Callback], Callback] | None = None,
        work_dir: str | None = None,
        device: torch.device | str | None = None,
        dp_process_group: dist.ProcessGroup | None = None,
        async_bookkeeping: bool | None = None,
        bookkeeping_soft_timeout: float = 30,
    ):
        self.config = config
        self.model_params = model_params
        self.train_module = train_module
        self.data_loader = data_loader
        # the settings as the loop reads them: typed once here
        self.max_duration = Duration.parse(config.max_duration, model_params=model_params)
        self.hard_stop = Duration.parse(config.hard_stop, model_params=model_params) if config.hard_stop else None
        self.steps_to_skip = [StepSkipRange(skip.start, skip.stop) for skip in config.steps_to_skip]
        self.cancel_check_interval = config.cancel_check_interval
        check_warm_start(config)
        self.extra_checkpoint_files = extra_checkpoint_files or {}
        # A remote save folder is written to a local work folder and uploaded in the background.
        storage = storage or StorageSection()
        self.checkpointer = checkpointer or Checkpointer(
            save_overwrite=config.save_overwrite, uploader=Uploader(storage), storage=storage
        )
        self._work_dir = str(work_dir) if work_dir is not None else None
        self.device = self._check_device(train_module, device)
        self.dp_process_group = self._check_dp_group(dp_process_group)

        self.global_step = 0
        self.global_train_tokens_seen = 0
        # counted when the train module knows its FLOPs per token and the data its sequence length
        self.global_train_petaflops = 0.0
        self._flops_per_token: float | None = None
        self.epoch = 1
        self.step_skipped = False  # whether the current step is one of steps_to_skip (not trained on)
        self.current_batch: Any = None  # the batch of the step being trained (OLMo-core's pre_step gets it)
        # None: a trained step is the train module's zero_grads, train_batch and optim_step. Else it is
        # ``step_runner(batch, emit)``, a recipe's own step (``honing.interop``) that emits pre_optim_step itself.
        self.step_runner: Callable[[Any, Callable[..., None]], None] | None = None
        self.canceled = False
        self.cancel_reason: str | None = None
        self._cancel_requested: str | None = None
        self._metrics = MetricsBuffer()
        self._ce_losses: set[str] = set()
        self._init_bookkeeping(async_bookkeeping, bookkeeping_soft_timeout)
        self._last_checkpoint_step: int | None = None
        self._checkpoint_loaded = False
        self._pending_saved: list[str] = []  # async saves finished, not yet announced to callbacks
        # Metrics are reduced across ranks in the bookkeeping thread, on a gloo group of their own so
        # those collectives never interleave with training's; created here, where every rank reaches it.
        self._metrics_group = new_background_group() if get_world_size() > 1 else None
        self._pending_logs: list[Future] = []
        # Cancel flags are exchanged every step by an asynchronous all-reduce on a gloo group of their own (not
        # the metrics group: the bookkeeping thread's collectives there would interleave with it differently on
        # each rank); a step's exchange is waited on at the next step's boundary, long done by then.
        self._cancel_group = new_background_group() if get_world_size() > 1 else None
        self._cancel_exchange: tuple[Any, torch.Tensor] | None = None

        self.callbacks: dict[str, Callback] = {}
        self._handlers: dict[str, list[Callable[..., Any]]] = {}
        self._callback_adapter = callback_adapter
        self._no_checkpoints = False
        self._no_evals = False
        for name, callback in (callbacks or {}).items():
            self.add_callback(name, callback)
        train_module.on_attach(self)

    @property
    def save_folder(self) -> str:
        """Where the run's checkpoints and files go: a local folder or a URL."""
        return self.config.save_folder

    # --- callbacks ----------------------------------------------------------------
    def add_callback(self, name: str | Callback, callback: Callback | None = None) -> None:
        """Register a callback under ``name`` (its state is checkpointed under that name); a name already
        registered is an error, as in OLMo-core. ``add_callback(callback)`` names it by its class."""
        if callback is None and isinstance(name, Callback):
            name, callback = type(name).__name__, name
        if name in self.callbacks:
            raise ConfigError(
                f"a callback named {name!r} is already registered "
                f"({type(self.callbacks[name]).__name__}); choose another name"
            )
        if self._callback_adapter is not None:
            callback = self._callback_adapter(callback)
        callback.attach(self)
        self.callbacks[name] = callback
        self.callbacks = dict(sorted(self.callbacks.items(), key=lambda item: -item[1].priority))
        self._handlers.clear()
        callback.post_attach()

    def add_callbacks(self, callbacks: dict[str, Callback]) -> None:
        """Register several callbacks by name (``add_callback`` for each)."""
        for name, callback in callbacks.items():
            self.add_callback(name, callback)

    def has_callback(self, callback: type[Callback] | str) -> bool:
        """True when a callback of this class (or a subclass), or registered under this name, is registered."""
        if isinstance(callback, str):
            return callback in self.callbacks
        return any(isinstance(registered, callback) for registered in self.callbacks.values())

    @property
    def no_checkpoints(self) -> bool:
        """When True (e.g. for benchmarking), nothing is loaded at the start and the checkpointer
        callbacks get no events, so nothing is saved (an explicit ``save_checkpoint`` still saves)."""
        return self._no_checkpoints

    @no_checkpoints.setter
    def no_checkpoints(self, value: bool) -> None:
        self._no_checkpoints = bool(value)
        self._handlers.clear()

    @property
    def no_evals(self) -> bool:
        """When True (e.g. for benchmarking), the evaluator callbacks get no events, so nothing is evaluated."""
        return self._no_evals

    @no_evals.setter
    def no_evals(self, value: bool) -> None:
        self._no_evals = bool(value)
        self._handlers.clear()

    def _active(self, callback: Callback) -> bool:
        """Whether ``callback`` receives events under ``no_checkpoints`` and ``no_evals``."""
        if self._no_checkpoints and isinstance(callback, CheckpointerCallback):
            return False
        return not (self._no_evals and _is_evaluator(callback))

    def _emit(self, event: str, *args: Any) -> None:
        handlers = self._handlers.get(event)
        if handlers is None:
            handlers = self._handlers_for(event)
        for handler in handlers:
            handler(*args)

    def _handlers_for(self, event: str) -> list[Callable[..., Any]]:
        """The callbacks' methods for ``event``, by priority: only those that implement it, since at millisecond
        steps calling every callback's no-op on_step_begin/on_step_end shows in tokens/s."""
        found = self._handlers.get(event)
        if found is None:
            found = self._handlers[event] = [
                getattr(callback, event)
                for callback in self.callbacks.values()
                if self._active(callback) and _implements(callback, event)
            ]
        return found

    # --- OLMo-core's fields ------------------------------------------------------------
    @property
    def save_overwrite(self) -> bool:
        """Whether a checkpoint already in the save folder at the same step is replaced instead of refused."""
        return self.config.save_overwrite

    @save_overwrite.setter
    def save_overwrite(self, value: bool) -> None:
        self.config = self.config.model_copy(update={"save_overwrite": bool(value)})
        self.checkpointer.save_overwrite = bool(value)

    def _check_device(self, train_module: Any, device: torch.device | str | None) -> torch.device:
        trains_on = module_device(train_module)
        if device is None:
            return trains_on or default_device()
        device = torch.device(device)
        if trains_on is not None and trains_on.type != device.type:
            raise ConfigError(
                f"device: {device} was given, but the train module's model is on {trains_on}; move the model "
                "there first, or leave device unset"
            )
        return device

    @staticmethod
    def _check_dp_group(group: dist.ProcessGroup | None) -> dist.ProcessGroup | None:
        if group is not None and is_distributed() and dist.get_world_size(group) != get_world_size():
            raise ConfigError(
                f"dp_process_group: a group of {dist.get_world_size(group)} of the {get_world_size()} ranks is not "
                "supported (the Trainer reduces metrics and exchanges cancels over every rank; a train module's "
                "data-parallel ranks come from its ParallelDims); leave it unset"
            )
        return group

    # --- the loop -------------------------------------------------------------------
    def fit(self) -> None:
        """Train until the duration, a hard stop or a cancel; then run the end-of-training callbacks."""
        self._load_at_start()
        self._flops_per_token = self._model_flops_per_token()
        try:
            with GracefulStop(self.cancel_run):
                self._emit("on_train_begin")
                while not self.training_complete:
                    self._fit_epoch()
                self._finish_cancel_exchange()  # every rank started it after the last step: none is left waiting
                self._log_metrics(wait=True)
                self._emit_train_end()
                self.checkpointer.wait()
                self._announce_async_saves()
                self.wait_for_bookkeeping()
                self.checkpointer.wait_for_uploads()  # bounded: what has not arrived stays in the work folder
        except BaseException as error:
            self._emit("on_error", error)
            self._finish_staged_checkpoint()
            # A failed rank must exit promptly: its bookkeeping may wait in a collective for a peer that
            # never joins, and other ranks learn of the failure only when this process is gone.
            self._shutdown_bookkeeping(wait=not is_distributed(), cancel_futures=True)
            raise
        else:
            self._shutdown_bookkeeping(wait=True)

    def _emit_train_end(self) -> None:
        # What a callback records at train end (a canceled run's evaluation) is logged before the next
        # callback's on_train_end, so the trackers, which close last, still receive it.
        for handler in self._handlers_for("on_train_end"):
            handler()
            self._log_metrics(wait=True)

    def _finish_staged_checkpoint(self) -> None:
        # An asynchronous save staged before the failure is still written: every rank's writer thread
        # runs apart from training, so it does not wait on the failed step (it fails fast if a peer died).
        try:
            self.checkpointer.wait()
        except Exception as error:
            log.warning("the checkpoint being written when training failed is incomplete: %s", error)

    def _fit_epoch(self) -> None:
        self.epoch = self.data_loader.epoch
        self._emit("on_epoch_begin")
        for batch in self.data_loader:
            self._train_step(batch)
            if self.training_complete:
                return
        self._emit("on_epoch_end")

    def _train_step(self, batch: Any) -> None:
        self.global_step += 1
        self.current_batch = batch
        self.step_skipped = bool(self.steps_to_skip) and any(self.global_step in skip for skip in self.steps_to_skip)
        self._emit("on_step_begin")
        if self.step_skipped:
            log.info("step %d is in steps_to_skip: its batch is consumed but not trained on", self.global_step)
        elif self.step_runner is None:
            self.train_module.zero_grads()
            self.train_module.train_batch(batch)
            self._emit("pre_optim_step")
            self.train_module.optim_step()
        else:
            self.step_runner(batch, self._emit)
        # asked of the train module after its step: a method that generates counts what it generated
        tokens = self.train_module.num_tokens(batch)
        self.global_train_tokens_seen += tokens
        if self._flops_per_token and not self.step_skipped:
            self.global_train_petaflops += tokens * self._flops_per_token / 1e15
        self._emit("post_train_batch")
        self._emit("on_step_end")
        # the bookkeeping below is a few attribute reads unless something is pending
        if self._pending_saved:
            self._announce_async_saves()
        if self._pending_logs:
            self._announce_logs()
        # one process without a cancel request has nothing to check or exchange
        if (self._cancel_group is not None or self._cancel_requested is not None) and (
            self.global_step % self.cancel_check_interval == 0
        ):
            self.check_if_canceled()
        if self.global_step % self.config.metrics_collect_interval == 0 or self.training_complete:
            self._log_metrics()

    def _model_flops_per_token(self) -> float | None:
        """The train module's FLOPs per token at the data's sequence length (the loader's ``seq_len``, else its
        rows' ``tokens_per_row``), when both are known."""
        rows = getattr(self.data_loader, "dataset", None)
        seq_len = getattr(self.data_loader, "seq_len", None) or getattr(rows, "tokens_per_row", None)
        flops = getattr(self.train_module, "num_flops_per_token", None)
        return flops(seq_len) if seq_len and flops is not None else None
