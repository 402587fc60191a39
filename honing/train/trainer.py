"""The training loop. It knows the TrainModule's methods, never which loss it trains."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import ClassVar

import torch
import torch.distributed as dist

from honing.config.schema import StorageSection, TrainerSection
from honing.distributed import is_distributed
from honing.errors import ConfigError
from honing.train.callbacks.base import Callback
from honing.train.callbacks.checkpointer import CheckpointerCallback
from honing.train.callbacks.evaluator import EvaluatorCallback
from honing.train.callbacks.generation_eval import GenerationEvalCallback
from honing.train.callbacks.harness_eval import HarnessEvalCallback
from honing.train.checkpoint import Checkpointer
from honing.train.common import StepSkipRange
from honing.train.remote import Uploader
from honing.train.signals import GracefulStop
from honing.train.train_module import TrainModule
from honing.train.trainer_bookkeeping import Bookkeeping
from honing.train.trainer_cancel import Cancellation
from honing.train.trainer_checkpoints import Checkpoints
from honing.train.trainer_delegates import Delegated, delegated_value
from honing.train.trainer_files import RunFiles
from honing.train.trainer_metrics import Metrics
from honing.train.trainer_progress import DataLoaderLike, Progress
from honing.train.trainer_setup import (
    TrainerSetting,
    check_device,
    check_dp_group,
    check_warm_start,
    model_flops_per_token,
    replace_settings,
)

log = logging.getLogger(__name__)


def _is_evaluator(callback: Callback) -> bool:
    """An evaluation callback: ``no_evals`` turns it off."""
    return isinstance(callback, (EvaluatorCallback, GenerationEvalCallback, HarnessEvalCallback))


def _implements(callback: Callback, event: str) -> bool:
    """True when ``callback`` does something at ``event``, rather than inheriting the base class's no-op."""
    method = getattr(callback, event)
    return getattr(method, "__func__", method) is not getattr(Callback, event)


class Trainer:
    """Runs ``fit()``: load a checkpoint, then step until the duration, a hard stop or a cancel.

    It takes its settings as the config's ``trainer`` section (``storage`` says how a remote save folder is
    written and uploaded); the rest are the run's parts: the train module, the data loader, the callbacks, the
    files every checkpoint holds (``extra_checkpoint_files``) and ``model_params`` for "chinchilla" durations.
    ``callback_adapter`` sees every callback as it is registered (the recipe's adapts other systems' event
    names, ``honing.interop.callback_names``); the trainer itself calls honing's event names only.

    The Trainer owns the loop and the callbacks; the rest is its collaborators', each with its own state:
    ``progress`` (step, tokens, epoch, durations), ``metrics``, ``checkpoints`` (state, saves, loads),
    ``cancellation``, ``bookkeeping`` (background threads) and ``files`` (work folder, written files). OLMo-core's
    Trainer names for their methods and fields (``record_metric``, ``global_step`` ...) are kept on the Trainer
    and are the collaborators' (``trainer_delegates.py``).

    OLMo-core's Trainer fields that are not settings of the section: ``work_dir`` (the local folder for working
    files; default: the save folder, or a remote one's work folder), ``device`` (default: the train module's),
    ``dp_process_group`` (None: every rank; a smaller group is refused), ``async_bookkeeping`` (None: True) and
    ``bookkeeping_soft_timeout`` (seconds a bookkeeping op may take before a warning)."""

    #: the checkpoints collaborator's class (OLMo-core's edge gives the load settings its document's meaning)
    checkpoints_type: ClassVar[type[Checkpoints]] = Checkpoints

    metrics_collect_interval = TrainerSetting("How often (in steps) metrics are collected, reduced and logged.")
    load_path = TrainerSetting("A checkpoint, or a folder of them, to start from when the save folder has none.")
    load_trainer_state = TrainerSetting("Whether ``load_path``'s trainer state is loaded (None: when it has one).")
    load_optim_state = TrainerSetting("Whether ``load_path``'s optimizer state is loaded (None: when it has one).")

    # progress: how far the run is and goes
    global_step = delegated_value("progress.global_step", settable=True)
    global_train_tokens_seen = delegated_value("progress.global_train_tokens_seen", settable=True)
    global_train_petaflops = delegated_value("progress.global_train_petaflops", settable=True)
    epoch = delegated_value("progress.epoch", settable=True)
    data_loader = delegated_value("progress.data_loader", settable=True)
    max_duration = delegated_value("progress.max_duration", settable=True)
    hard_stop = delegated_value("progress.hard_stop", settable=True)
    model_params = delegated_value("progress.model_params")
    tokens_per_batch = delegated_value("progress.tokens_per_batch")
    max_steps = delegated_value("progress.max_steps")
    max_tokens = delegated_value("progress.max_tokens")
    stop_step = delegated_value("progress.stop_step")
    steps_per_epoch = delegated_value("progress.steps_per_epoch")
    tokens_per_epoch = delegated_value("progress.tokens_per_epoch")
    global_batch_size = delegated_value("progress.global_batch_size")
    rank_batch_size = delegated_value("progress.rank_batch_size")
    steps_for = Delegated("progress", Progress.steps_for)
    convert_duration_to_steps = Delegated("progress", Progress.convert_duration_to_steps)
    # metrics
    record_metric = Delegated("metrics", Metrics.record_metric)
    record_ce_loss = Delegated("metrics", Metrics.record_ce_loss)
    get_metric = Delegated("metrics", Metrics.get_metric)
    log_samples = Delegated("metrics", Metrics.log_samples)
    check_loss_finite = Delegated("metrics", Metrics.check_loss_finite)
    # checkpoints: the trainer state, saves and loads
    state_dict = Delegated("checkpoints", Checkpoints.state_dict)
    load_state_dict = Delegated("checkpoints", Checkpoints.load_state_dict)
    checkpoint_dir = Delegated("checkpoints", Checkpoints.checkpoint_dir)
    save_checkpoint = Delegated("checkpoints", Checkpoints.save)
    save_checkpoint_async = Delegated("checkpoints", Checkpoints.save_async)
    load_checkpoint = Delegated("checkpoints", Checkpoints.load)
    maybe_load_checkpoint = Delegated("checkpoints", Checkpoints.maybe_load)
    load_strategy = delegated_value("checkpoints.load_strategy")
    last_checkpoint_step = delegated_value("checkpoints.last_checkpoint_step")
    checkpoint_loaded = delegated_value("checkpoints.loaded")
    extra_checkpoint_files = delegated_value("checkpoints.extra_files")
    # cancellation
    cancel_run = Delegated("cancellation", Cancellation.request)
    check_if_canceled = Delegated("cancellation", Cancellation.check)
    stop_evaluating = Delegated("cancellation", Cancellation.stop_evaluating)
    canceled = delegated_value("cancellation.canceled", settable=True)
    is_canceled = delegated_value("cancellation.canceled")
    cancel_reason = delegated_value("cancellation.reason")
    cancel_check_interval = delegated_value("cancellation.check_interval", settable=True)
    # bookkeeping
    run_bookkeeping_op = Delegated("bookkeeping", Bookkeeping.run)
    wait_for_bookkeeping = Delegated("bookkeeping", Bookkeeping.wait)
    bookkeeping_pg = delegated_value("bookkeeping.group")
    bookkeeping_device = delegated_value("bookkeeping.device")
    single_thread_pool = delegated_value("bookkeeping.single_thread_pool")
    multi_thread_pool = delegated_value("bookkeeping.multi_thread_pool")
    async_bookkeeping = delegated_value("bookkeeping.async_bookkeeping", settable=True)
    bookkeeping_soft_timeout = delegated_value("bookkeeping.soft_timeout", settable=True)
    # files
    work_folder = delegated_value("files.work_folder")
    work_dir = delegated_value("files.work_dir")
    write_file = Delegated("files", RunFiles.write_file)
    persist_working_file = Delegated("files", RunFiles.persist_working_file)
    persist_working_subdir = Delegated("files", RunFiles.persist_working_subdir)

    def __init__(
        self,
        config: TrainerSection,
        *,
        train_module: TrainModule,
        data_loader: DataLoaderLike,
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
        self.train_module = train_module
        self.progress = Progress(config, data_loader, model_params)  # first: a bad duration is the first error
        self.steps_to_skip = [StepSkipRange(skip.start, skip.stop) for skip in config.steps_to_skip]
        check_warm_start(config)
        # A remote save folder is written to a local work folder and uploaded in the background.
        storage = storage or StorageSection()
        self.checkpointer = checkpointer or Checkpointer(
            save_overwrite=config.save_overwrite, uploader=Uploader(storage), storage=storage
        )
        self.device = check_device(train_module, device)
        self.dp_process_group = check_dp_group(dp_process_group)

        self.step_skipped = False  # whether the current step is one of steps_to_skip (not trained on)
        self.current_batch: object = None  # the batch of the step being trained (OLMo-core's pre_step gets it)
        # None: a trained step is the train module's zero_grads, train_batch and optim_step. Else it is
        # ``step_runner(batch, emit)``, a recipe's own step (``honing.interop``) that emits pre_optim_step itself.
        self.step_runner: Callable[[object, Callable[..., None]], None] | None = None
        self._flops_per_token: float | None = None
        self.callbacks: dict[str, Callback] = {}
        self._handlers: dict[str, list[Callable[..., None]]] = {}
        self._callback_adapter = callback_adapter
        self._no_checkpoints = False
        self._no_evals = False

        # The collaborators. Bookkeeping and cancellation each make a process group: every rank makes them here,
        # in this order.
        self.bookkeeping = Bookkeeping(async_bookkeeping=async_bookkeeping, soft_timeout=bookkeeping_soft_timeout)
        self.cancellation = Cancellation(config.cancel_check_interval, self.progress)
        self.metrics = Metrics(
            config,
            progress=self.progress,
            bookkeeping=self.bookkeeping,
            emit=self._emit,
            last_checkpoint_step=lambda: self.checkpoints.last_checkpoint_step,
        )
        self.checkpoints = self.checkpoints_type(
            config,
            checkpointer=self.checkpointer,
            train_module=train_module,
            extra_files=extra_checkpoint_files or {},
            progress=self.progress,
            metrics=self.metrics,
            callbacks=self.callbacks,
            emit=self._emit,
        )
        self.files = RunFiles(config.save_folder, self.checkpointer, work_dir)

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
        # reordered in place: the checkpoints hold this same dict
        ordered = sorted([*self.callbacks.items(), (name, callback)], key=lambda item: -item[1].priority)
        self.callbacks.clear()
        self.callbacks.update(ordered)
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

    def _emit(self, event: str, *args: object) -> None:
        handlers = self._handlers.get(event)
        if handlers is None:
            handlers = self._handlers_for(event)
        for handler in handlers:
            handler(*args)

    def _handlers_for(self, event: str) -> list[Callable[..., None]]:
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
        replace_settings(self, save_overwrite=bool(value))
        self.checkpointer.save_overwrite = bool(value)

    @property
    def training_complete(self) -> bool:
        """True once the duration or hard stop is reached, or the run was canceled."""
        progress = self.progress  # read twice a step: the two duration checks and nothing more
        return self.cancellation.canceled or progress.due(progress.max_duration) or progress.due(progress.hard_stop)

    @property
    def is_last_step(self) -> bool:
        """True during the run's final step (duration or hard stop reached), before its metrics are logged."""
        return self.training_complete or self.progress.global_step == self.progress.stop_step

    # --- the loop -------------------------------------------------------------------
    def fit(self) -> None:
        """Train until the duration, a hard stop or a cancel; then run the end-of-training callbacks."""
        if not self._no_checkpoints:
            self.checkpoints.load_at_start()
        self._flops_per_token = model_flops_per_token(self.train_module, self.progress.data_loader)
        try:
            with GracefulStop(self.cancellation.request_on_signal):
                self._emit("on_train_begin")
                while not self.training_complete:
                    self._fit_epoch()
                self.cancellation.finish_exchange()  # every rank started it after the last step: none is left waiting
                self.metrics.collect(wait=True)
                self._emit_train_end()
                self.checkpointer.wait()
                self.checkpoints.announce_saves()
                self.bookkeeping.wait()
                self.checkpointer.wait_for_uploads()  # bounded: what has not arrived stays in the work folder
        except BaseException as error:
            self._emit("on_error", error)
            self.checkpoints.finish_staged()
            # A failed rank must exit promptly: its bookkeeping may wait in a collective for a peer that
            # never joins, and other ranks learn of the failure only when this process is gone.
            self.bookkeeping.shutdown(wait=not is_distributed(), cancel_futures=True)
            raise
        else:
            self.bookkeeping.shutdown(wait=True)

    def _emit_train_end(self) -> None:
        # What a callback records at train end (a canceled run's evaluation) is logged before the next
        # callback's on_train_end, so the trackers, which close last, still receive it.
        for handler in self._handlers_for("on_train_end"):
            handler()
            self.metrics.collect(wait=True)

    def _fit_epoch(self) -> None:
        data_loader = self.progress.data_loader
        self.progress.epoch = data_loader.epoch
        self._emit("on_epoch_begin")
        for batch in data_loader:
            self._train_step(batch)
            if self.training_complete:
                return
        self._emit("on_epoch_end")

    def _train_step(self, batch: object) -> None:
        progress = self.progress
        progress.global_step += 1
        self.current_batch = batch
        self.step_skipped = bool(self.steps_to_skip) and any(
            progress.global_step in skip for skip in self.steps_to_skip
        )
        self._emit("on_step_begin")
        if self.step_skipped:
            log.info("step %d is in steps_to_skip: its batch is consumed but not trained on", progress.global_step)
        elif self.step_runner is None:
            self.train_module.zero_grads()
            self.train_module.train_batch(batch)
            self._emit("pre_optim_step")
            self.train_module.optim_step()
        else:
            self.step_runner(batch, self._emit)
        # asked of the train module after its step: a method that generates counts what it generated
        tokens = self.train_module.num_tokens(batch)
        progress.global_train_tokens_seen += tokens
        if self._flops_per_token and not self.step_skipped:
            progress.global_train_petaflops += tokens * self._flops_per_token / 1e15
        self._emit("post_train_batch")
        self._emit("on_step_end")
        # the bookkeeping below is a few attribute reads unless something is pending
        checkpoints, metrics, cancellation = self.checkpoints, self.metrics, self.cancellation
        if checkpoints.pending_saved:
            checkpoints.announce_saves()
        if metrics.pending_logs:
            metrics.announce()
        # one process without a cancel request has nothing to check or exchange
        if (cancellation.group is not None or cancellation.requested is not None) and (
            progress.global_step % cancellation.check_interval == 0
        ):
            cancellation.check()
        if progress.global_step % self.config.metrics_collect_interval == 0 or self.training_complete:
            metrics.collect()
