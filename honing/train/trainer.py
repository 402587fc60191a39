"""The training loop. It knows the TrainModule's methods, never which loss it trains."""

from __future__ import annotations

import logging
import math
import os
import shutil
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch

from honing import storage
from honing.config.schema import StorageSection, TrainerSection
from honing.distributed import get_world_size, is_distributed, is_rank0, new_background_group
from honing.errors import ConfigError
from honing.train.callbacks.base import Callback
from honing.train.callbacks.checkpointer import CheckpointerCallback
from honing.train.callbacks.evaluator import EvaluatorCallback
from honing.train.callbacks.generation_eval import GenerationEvalCallback
from honing.train.checkpoint import MARKER, Checkpointer
from honing.train.common import StepSkipRange
from honing.train.duration import Duration, DurationUnit
from honing.train.metrics import MetricsBuffer
from honing.train.remote import Uploader
from honing.train.signals import GracefulStop
from honing.train.train_module import TrainModule
from honing.train.trainer_cancel import TrainerCancel
from honing.train.trainer_checkpoints import TrainerCheckpoints
from honing.train.trainer_metrics import TrainerMetrics

log = logging.getLogger(__name__)


def _is_evaluator(callback: Callback) -> bool:
    """An evaluation callback: ``no_evals`` turns it off."""
    return isinstance(callback, (EvaluatorCallback, GenerationEvalCallback))


def _implements(callback: Callback, event: str) -> bool:
    """True when ``callback`` does something at ``event``, rather than inheriting the base class's no-op."""
    method = getattr(callback, event)
    return getattr(method, "__func__", method) is not getattr(Callback, event)


def check_warm_start(config: TrainerSection) -> None:
    """``load_trainer_state`` / ``load_optim_state`` say what ``load_path``'s checkpoint restores: set without it
    they would change nothing, so they are refused (one line naming the key)."""
    for key in ("load_trainer_state", "load_optim_state"):
        if config.load_path is None and getattr(config, key) != type(config).model_fields[key].default:
            raise ConfigError(
                f"trainer.{key}: says what the checkpoint of trainer.load_path restores, and trainer.load_path is "
                f"not set; set it, or remove trainer.{key}"
            )


class Trainer(TrainerCancel, TrainerCheckpoints, TrainerMetrics):
    """Runs ``fit()``: load a checkpoint, then step until the duration, a hard stop or a cancel.

    It takes its settings as the config's ``trainer`` section (``storage`` says how a remote save folder is
    written and uploaded); the rest are the run's parts: the train module, the data loader, the callbacks, the
    files every checkpoint holds (``extra_checkpoint_files``) and ``model_params`` for "chinchilla" durations.
    ``callback_adapter`` sees every callback as it is registered (the recipe's adapts other systems' event
    names, ``honing.interop.callback_names``); the trainer itself calls honing's event names only."""

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
    ):
        self.config = config
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

        self.global_step = 0
        self.global_train_tokens_seen = 0
        self.epoch = 1
        self.current_batch: Any = None  # the batch of the step being trained (OLMo-core's pre_step gets it)
        self.canceled = False
        self.cancel_reason: str | None = None
        self._cancel_requested: str | None = None
        self._metrics = MetricsBuffer()
        self._ce_losses: set[str] = set()
        self._bookkeeping = ThreadPoolExecutor(max_workers=1, thread_name_prefix="honing-bookkeeping")
        self._bookkeeping_futures: list[Future] = []
        self._last_checkpoint_step: int | None = None
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

    # --- progress -------------------------------------------------------------------
    @property
    def tokens_per_batch(self) -> int | None:
        """Global tokens per step when the data loader knows it ahead of time."""
        return getattr(self.data_loader, "tokens_per_batch", None)

    def steps_for(self, duration: Duration) -> int | None:
        """The step at which ``duration`` is reached, when it can be known in advance."""
        if duration.unit == DurationUnit.steps:
            return duration.value
        if duration.unit == DurationUnit.epochs:
            return duration.value * self.data_loader.batches_per_epoch
        if self.tokens_per_batch:
            return math.ceil(duration.value / self.tokens_per_batch)
        return None

    @property
    def max_steps(self) -> int | None:
        """The total number of steps of this run's schedule (``max_duration``, not ``hard_stop``)."""
        return self.steps_for(self.max_duration)

    @property
    def global_batch_size(self) -> int | None:
        """The global batch size in tokens, as OLMo-core's (the data loader's ``global_batch_size`` counts
        rows): known when every batch holds the same number of tokens, else None (e.g. padded rows)."""
        return self.tokens_per_batch

    @property
    def rank_batch_size(self) -> int | None:
        """This rank's share of ``global_batch_size``, in tokens (None when that is unknown)."""
        tokens = self.global_batch_size
        world = getattr(self.data_loader, "world_size", None) or get_world_size()
        return None if tokens is None else tokens // world

    @property
    def steps_per_epoch(self) -> int | None:
        """Training steps in one epoch, when the data loader knows it."""
        return getattr(self.data_loader, "batches_per_epoch", None)

    @property
    def tokens_per_epoch(self) -> int | None:
        """Tokens in one epoch (left-over rows not counted), when batches have a fixed token count."""
        steps, tokens = self.steps_per_epoch, self.tokens_per_batch
        return None if steps is None or tokens is None else steps * tokens

    @property
    def max_tokens(self) -> int | None:
        """The tokens this run's ``max_duration`` trains on: the tokens seen so far plus the remaining
        steps' tokens; None when that cannot be known ahead (an epoch or step duration over batches whose
        token count varies)."""
        if self.max_duration.unit == DurationUnit.tokens:
            return self.max_duration.value
        max_steps, tokens = self.max_steps, self.tokens_per_batch
        if max_steps is None or tokens is None:
            return None
        return self.global_train_tokens_seen + max(max_steps - self.global_step, 0) * tokens

    @property
    def stop_step(self) -> int | None:
        """The step training will actually stop at (the earlier of duration and hard stop)."""
        steps = [s for s in (self.max_steps, self.steps_for(self.hard_stop) if self.hard_stop else None) if s]
        return min(steps) if steps else None

    def _due(self, duration: Duration | None) -> bool:
        return duration is not None and duration.due(
            step=self.global_step, tokens=self.global_train_tokens_seen, epoch=self.data_loader.epoch
        )

    @property
    def is_last_step(self) -> bool:
        """True during the run's final step (duration or hard stop reached), before its metrics are logged."""
        return self.training_complete or self.global_step == self.stop_step

    @property
    def training_complete(self) -> bool:
        """True once the duration or hard stop is reached, or the run was canceled."""
        return self.canceled or self._due(self.max_duration) or self._due(self.hard_stop)

    # --- bookkeeping off the hot path ----------------------------------------------
    def run_bookkeeping_op(self, op: Callable[..., Any], *args: Any, **kwargs: Any) -> Future:
        """Run ``op`` in the bookkeeping thread, so I/O does not block training."""
        future = self._bookkeeping.submit(op, *args, **kwargs)
        self._bookkeeping_futures = [f for f in self._bookkeeping_futures if not f.done()] + [future]
        return future

    def wait_for_bookkeeping(self) -> None:
        """Block until every bookkeeping op has finished, re-raising the first error."""
        for future in self._bookkeeping_futures:
            future.result()
        self._bookkeeping_futures.clear()

    @property
    def work_folder(self) -> str:
        """The local folder for the run's files: the save folder, or for a remote one its local work folder."""
        return self.checkpointer.work_folder(self.save_folder)

    def write_file(self, name: str, contents: str | bytes) -> str:
        """Write ``contents`` to ``SAVE_FOLDER/name`` (rank 0; a remote save folder gets it uploaded in the
        background from the work folder) and return the path."""
        path = storage.join(self.save_folder, name)
        if is_rank0():
            local = os.path.join(self.work_folder, name)
            os.makedirs(os.path.dirname(local) or ".", exist_ok=True)
            tmp = f"{local}.tmp"
            with open(tmp, "wb") as handle:
                handle.write(contents.encode() if isinstance(contents, str) else contents)
            os.replace(tmp, local)
            if local != path:
                self.checkpointer.uploader.upload_file(local, path)
        return path

    def persist_working_file(self, path: str) -> str:
        """Copy a local working file (or folder) into the save folder under the same name (rank 0); to a
        remote save folder it is uploaded in the background, a folder with a ``.complete`` marker last."""
        target = storage.join(self.save_folder, os.path.basename(path.rstrip(os.sep)))
        if not is_rank0():
            return target
        if storage.is_url(target):
            if os.path.isdir(path):
                self.checkpointer.uploader.upload_folder(path, target, marker=MARKER)
            else:
                self.checkpointer.uploader.upload_file(path, target)
        elif os.path.abspath(path) != os.path.abspath(target):
            os.makedirs(self.save_folder, exist_ok=True)
            if os.path.isdir(path):
                shutil.copytree(path, target, dirs_exist_ok=True)
            else:
                shutil.copyfile(path, target)
        return target

    # --- the loop -------------------------------------------------------------------
    def fit(self) -> None:
        """Train until the duration, a hard stop or a cancel; then run the end-of-training callbacks."""
        self._load_at_start()
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
            self._bookkeeping.shutdown(wait=not is_distributed(), cancel_futures=True)
            raise
        else:
            self._bookkeeping.shutdown(wait=True)

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
        self._emit("on_step_begin")
        if self.steps_to_skip and any(self.global_step in skip for skip in self.steps_to_skip):
            log.info("step %d is in steps_to_skip: its batch is consumed but not trained on", self.global_step)
        else:
            self.train_module.zero_grads()
            self.train_module.train_batch(batch)
            self._emit("pre_optim_step")
            self.train_module.optim_step()
        # asked of the train module after its step: a method that generates counts what it generated
        self.global_train_tokens_seen += self.train_module.num_tokens(batch)
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
