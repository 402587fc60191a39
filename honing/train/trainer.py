"""The training loop. It knows the TrainModule's methods, never which loss it trains."""

from __future__ import annotations

import logging
import math
import os
import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

import torch
import torch.distributed as dist

from honing.distributed import (
    barrier,
    get_world_size,
    is_distributed,
    is_rank0,
    new_background_group,
    seed_all,
)
from honing import storage
from honing.errors import CheckpointError
from honing.train.callbacks.base import Callback
from honing.train.checkpoint import MARKER, Checkpointer
from honing.train.duration import Duration, DurationUnit
from honing.train.metrics import MetricMergeStrategy, MetricsBuffer, MetricValue, ReduceType, reduce_steps
from honing.train.rng import rng_state, set_rng_state
from honing.train.remote import Uploader
from honing.train.signals import GracefulStop
from honing.train.train_module import TrainModule
from honing.train.trainer_config import LoadStrategy, StepSkipRange

log = logging.getLogger(__name__)


class Trainer:
    """Runs ``fit()``: load a checkpoint, then step until the duration, a hard stop or a cancel."""

    def __init__(self, *, save_folder: str, train_module: TrainModule, data_loader: Any,
                 max_duration: Duration, hard_stop: Duration | None = None, load_path: str | None = None,
                 load_strategy: LoadStrategy = LoadStrategy.if_available, metrics_collect_interval: int = 10,
                 cancel_check_interval: int = 10, steps_to_skip: list[StepSkipRange] | None = None,
                 save_overwrite: bool = False, callbacks: dict[str, Callback] | None = None,
                 extra_checkpoint_files: dict[str, str | bytes] | None = None):
        self.save_folder = save_folder
        self.train_module = train_module
        self.data_loader = data_loader
        self.max_duration = max_duration
        self.hard_stop = hard_stop
        self.load_path = load_path
        self.load_strategy = load_strategy
        self.metrics_collect_interval = metrics_collect_interval
        self.cancel_check_interval = cancel_check_interval
        self.steps_to_skip = steps_to_skip or []
        self.extra_checkpoint_files = extra_checkpoint_files or {}
        # A remote save folder is written to a local work folder and uploaded in the background.
        self.checkpointer = Checkpointer(save_overwrite=save_overwrite, uploader=Uploader())

        self.global_step = 0
        self.global_train_tokens_seen = 0
        self.epoch = 1
        self.canceled = False
        self.cancel_reason: str | None = None
        self._cancel_requested: str | None = None
        self._metrics = MetricsBuffer()
        self._bookkeeping = ThreadPoolExecutor(max_workers=1, thread_name_prefix="honing-bookkeeping")
        self._bookkeeping_futures: list[Future] = []
        self._last_checkpoint_step: int | None = None
        self._pending_saved: list[str] = []  # async saves finished, not yet announced to callbacks
        # Metrics are reduced across ranks in the bookkeeping thread, on a gloo group of their own so
        # those collectives never interleave with training's; created here, where every rank reaches it.
        self._metrics_group = new_background_group() if get_world_size() > 1 else None
        self._pending_logs: list[Future] = []  # reductions in flight, announced in order

        self.callbacks: dict[str, Callback] = {}
        self._handlers: dict[str, list[Callable[..., Any]]] = {}
        for name, callback in (callbacks or {}).items():
            self.add_callback(name, callback)
        train_module.on_attach(self)

    # --- callbacks ----------------------------------------------------------------
    def add_callback(self, name: str, callback: Callback) -> None:
        """Register a callback under ``name`` (its state is checkpointed under that name)."""
        callback.attach(self)
        self.callbacks[name] = callback
        self.callbacks = dict(sorted(self.callbacks.items(), key=lambda item: -item[1].priority))
        self._handlers.clear()

    def _emit(self, event: str, *args: Any) -> None:
        for handler in self._handlers_for(event):
            handler(*args)

    def _handlers_for(self, event: str) -> list[Callable[..., Any]]:
        """The callbacks' methods for ``event``, by priority: only those that override it, since at
        millisecond steps calling every callback's no-op on_step_begin/on_step_end shows in tokens/s."""
        handlers = self._handlers.get(event)
        if handlers is None:
            base = getattr(Callback, event)
            handlers = self._handlers[event] = [
                getattr(callback, event) for callback in self.callbacks.values()
                if getattr(getattr(callback, event), "__func__", None) is not base]
        return handlers

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
    def stop_step(self) -> int | None:
        """The step training will actually stop at (the earlier of duration and hard stop)."""
        steps = [s for s in (self.max_steps, self.steps_for(self.hard_stop) if self.hard_stop else None) if s]
        return min(steps) if steps else None

    def _due(self, duration: Duration | None) -> bool:
        return duration is not None and duration.due(
            step=self.global_step, tokens=self.global_train_tokens_seen, epoch=self.data_loader.epoch)

    @property
    def is_last_step(self) -> bool:
        """True during the run's final step (duration or hard stop reached), before its metrics are logged."""
        return self.training_complete or self.global_step == self.stop_step

    @property
    def training_complete(self) -> bool:
        """True once the duration or hard stop is reached, or the run was canceled."""
        return self.canceled or self._due(self.max_duration) or self._due(self.hard_stop)

    # --- metrics --------------------------------------------------------------------
    def record_metric(self, name: str, value: MetricValue, reduce_type: ReduceType | str | None = None,
                      namespace: str | None = None,
                      merge_strategy: MetricMergeStrategy | str = MetricMergeStrategy.warn) -> None:
        """Record a metric for the current step; tensors stay on device until collection."""
        if namespace:
            name = f"{namespace.rstrip('/')}/{name}"
        self._metrics.record(self.global_step, name, value, reduce_type, merge_strategy)

    def record_ce_loss(self, value: MetricValue, reduce_type: ReduceType | str | None = ReduceType.mean) -> None:
        """Record the training cross-entropy loss; its perplexity is logged with it, computed from the
        loss once it is reduced across ranks (as OLMo-core does), so the hot path pays for one metric."""
        self.record_metric("train/loss", value, reduce_type)

    def log_samples(self, name: str, rows: list[dict[str, Any]]) -> None:
        """Hand generated text (rows of the same keys) to the callbacks, e.g. as a W&B table."""
        self._emit("on_log_samples", self.global_step, name, rows)

    def get_metric(self, name: str, step: int | None = None) -> torch.Tensor | None:
        """A metric recorded this step (or at ``step``) that has not been collected yet."""
        return self._metrics.get(self.global_step if step is None else step, name)

    def _log_metrics(self, *, wait: bool = False) -> None:
        local, reduce_types = self._metrics.collect_local()
        if local and self._metrics_group is None:  # one process: nothing to reduce
            self._emit_logs(local)
        elif local:
            self._pending_logs.append(self.run_bookkeeping_op(reduce_steps, local, reduce_types, self._metrics_group))
        self._announce_logs(wait=wait)

    def _announce_logs(self, *, wait: bool = False) -> None:
        # on_log runs on the training thread, once a step's reduction is done (at once when ``wait``)
        while self._pending_logs and (wait or self._pending_logs[0].done()):
            self._emit_logs(self._pending_logs.pop(0).result())

    def _emit_logs(self, steps: dict[int, dict[str, float]]) -> None:
        for step, metrics in steps.items():
            if "train/loss" in metrics:
                metrics["train/perplexity"] = math.exp(min(metrics["train/loss"], 50.0))
            self._emit("on_log", step, metrics)

    # --- cancel ---------------------------------------------------------------------
    def cancel_run(self, reason: str) -> None:
        """Ask the run to stop gracefully at the next cancel check (safe from signal handlers)."""
        self._cancel_requested = reason

    def check_if_canceled(self) -> None:
        """Agree across ranks whether any rank asked to cancel; if so, stop after this step."""
        requested = self._cancel_requested is not None
        if is_distributed():
            flag = torch.tensor([1 if requested else 0], dtype=torch.int32)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            requested = bool(flag.item())
        if requested and not self.canceled:
            self.canceled = True
            self.cancel_reason = self._cancel_requested or "another rank canceled the run"
            log.warning("canceling the run at step %d: %s", self.global_step, self.cancel_reason)

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
        return self.checkpointer.local_folder(self.save_folder)

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

    # --- state ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The trainer's own state for this rank: progress, data position, RNG, callbacks."""
        return {
            "global_step": self.global_step,
            "global_train_tokens_seen": self.global_train_tokens_seen,
            "epoch": self.epoch,
            "world_size": get_world_size(),
            "data_loader": self.data_loader.state_dict(),
            "rng": rng_state(),
            "callbacks": {name: cb.state_dict() for name, cb in self.callbacks.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned (RNG only when the world size is unchanged)."""
        self.global_step = int(state["global_step"])
        self.global_train_tokens_seen = int(state["global_train_tokens_seen"])
        self.epoch = int(state["epoch"])
        self.data_loader.load_state_dict(state["data_loader"])
        same_world = state.get("world_size", 1) == get_world_size() and not state.get("_world_size_changed")
        if same_world:
            set_rng_state(state["rng"])
        else:
            # Saved per-rank states do not map onto the new ranks; every rank restarts from the run's
            # seed (torch's initial seed, set by prepare_training_environment) plus the step.
            seed_all(torch.initial_seed() + self.global_step)
            log.warning("world size changed since the checkpoint (%s → %d): the data position is kept, RNG "
                        "states are re-seeded from the seed plus the step (%d), so random draws (e.g. dropout) "
                        "differ from an uninterrupted run", state.get("world_size"), get_world_size(),
                        self.global_step)
        for name, callback_state in state.get("callbacks", {}).items():
            if name in self.callbacks:
                self.callbacks[name].load_state_dict(callback_state)

    # --- checkpoints ----------------------------------------------------------------
    def checkpoint_dir(self, step: int | None = None) -> str:
        """``SAVE_FOLDER/stepN`` for this (or the given) step."""
        return storage.join(self.save_folder, f"step{self.global_step if step is None else step}")

    def save_checkpoint(self) -> str:
        """Save a checkpoint of the current step and wait for it to be complete."""
        path = self.checkpoint_dir()
        self.checkpointer.save(path, self.train_module, self.state_dict(), extra_files=self.extra_checkpoint_files)
        self._last_checkpoint_step = self.global_step
        self._emit("on_checkpoint_saved", path)
        return path

    def save_checkpoint_async(self) -> Future:
        """Stage a checkpoint of the current step and write it in the background."""
        path = self.checkpoint_dir()
        future = self.checkpointer.save_async(path, self.train_module, self.state_dict(),
                                              extra_files=self.extra_checkpoint_files)
        self._last_checkpoint_step = self.global_step
        future.add_done_callback(lambda f: f.exception() is None and self._pending_saved.append(path))
        return future

    def _announce_async_saves(self) -> None:
        # callbacks run on the training thread, never from the writer thread
        while self._pending_saved:
            self._emit("on_checkpoint_saved", self._pending_saved.pop(0))

    @property
    def last_checkpoint_step(self) -> int | None:
        """The step of the most recent checkpoint this run saved (or loaded)."""
        return self._last_checkpoint_step

    def load_checkpoint(self, path: str, *, load_trainer_state: bool = True) -> None:
        """Load model, optimizer and (optionally) trainer state from a checkpoint directory."""
        state = self.checkpointer.load(path, self.train_module, load_trainer_state=load_trainer_state)
        if state is not None:
            self.load_state_dict(state)
        self._last_checkpoint_step = self.global_step
        log.info("loaded checkpoint %s (step %d)", path, self.global_step)

    def maybe_load_checkpoint(self, folder: str | None = None) -> bool:
        """Load the newest loadable checkpoint in ``folder`` (default: the save folder), falling back
        to older ones when the newest is corrupt. Returns whether one was loaded."""
        folder = folder or self.save_folder
        if is_rank0() and storage.isdir(folder):
            for removed in Checkpointer.clean_incomplete(folder):
                log.warning("removed incomplete checkpoint %s", removed)
        barrier()
        if Checkpointer.dir_is_checkpoint(folder):
            candidates = [folder]
        else:
            candidates = [path for _, path in reversed(Checkpointer.find_checkpoints(folder))]
        for path in candidates:
            try:
                self.load_checkpoint(path)
                return True
            except CheckpointError as error:
                log.warning("skipping checkpoint %s: %s", path, error)
        return False

    def _load_at_start(self) -> None:
        if self.load_strategy == LoadStrategy.never:
            return
        for folder in (self.save_folder, self.load_path):
            if folder and self.maybe_load_checkpoint(folder):
                return
        if self.load_strategy == LoadStrategy.always:
            raise CheckpointError(
                f"load_strategy is 'always' but no loadable checkpoint was found in "
                f"{self.save_folder!r}" + (f" or {self.load_path!r}" if self.load_path else ""))

    # --- the loop -------------------------------------------------------------------
    def fit(self) -> None:
        """Train until the duration, a hard stop or a cancel; then run the end-of-training callbacks."""
        self._load_at_start()
        try:
            with GracefulStop(self.cancel_run):
                self._emit("on_train_begin")
                while not self.training_complete:
                    self._fit_epoch()
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

    def _train_step(self, batch: dict[str, Any]) -> None:
        self.global_step += 1
        self.global_train_tokens_seen += self.data_loader.global_num_tokens_in_batch(batch)
        self._emit("on_step_begin")
        if any(self.global_step in skip for skip in self.steps_to_skip):
            log.info("step %d is in steps_to_skip: its batch is consumed but not trained on", self.global_step)
        else:
            self.train_module.zero_grads()
            self.train_module.train_batch(batch)
            self.train_module.optim_step()
        self._emit("on_step_end")
        self._announce_async_saves()
        self._announce_logs()
        if self.global_step % self.cancel_check_interval == 0:
            self.check_if_canceled()
        if self.global_step % self.metrics_collect_interval == 0 or self.training_complete:
            self._log_metrics()
