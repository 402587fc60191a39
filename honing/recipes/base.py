"""The recipe: turns a RunConfig into model assets, data, a TrainModule, callbacks and a Trainer.

Each ``build_*`` step is a method so a user can subclass a recipe and replace one step
(VeOmni's pattern); method recipes differ from this base only where the method differs.
"""

from __future__ import annotations

import importlib
import logging
import os
from datetime import timedelta
from typing import Any

import torch

from honing import storage
from honing.config import RunConfig, to_yaml
from honing.distributed import (
    default_device,
    get_world_size,
    is_rank0,
    prepare_training_environment,
    teardown_training_environment,
)
from honing.errors import ConfigError
from honing.models import (
    build_model_config,
    build_model_from_config,
    count_parameters,
    export_hf,
    load_pretrained_model,
    unwrap_model,
)
from honing.models.parallel import full_state_dict, is_fsdp, parallelize
from honing.optim.param_groups import build_adamw
from honing.train import Callback, Trainer, TrainerConfig
from honing.train.callbacks.checkpointer import CheckpointerCallback
from honing.train.callbacks.console import ConsoleCallback
from honing.train.callbacks.evaluator import EvaluatorCallback
from honing.train.callbacks.export import ExportCallback
from honing.train.callbacks.gc import GarbageCollectorCallback
from honing.train.callbacks.metrics_file import MetricsFileCallback
from honing.train.callbacks.profiler import ProfilerCallback
from honing.train.callbacks.sample import TextSampleCallback
from honing.train.callbacks.speed_monitor import SpeedMonitorCallback
from honing.train.callbacks.tensorboard import TensorBoardCallback
from honing.train.callbacks.upload import CheckpointUploadCallback
from honing.train.callbacks.wandb import WandbCallback
from honing.train.trainer_config import StepSkipRange

log = logging.getLogger(__name__)


class Recipe:
    """Build everything a run needs from its config, then ``run()`` it."""

    def __init__(self, config: RunConfig):
        self.config = config
        self.device = self.build_device()
        self.tokenizer: Any = None
        self.model: torch.nn.Module | None = None
        self.train_module: Any = None
        self.train_loader: Any = None
        self.eval_batches: Any = None
        self.trainer: Trainer | None = None
        self.data_reports: dict[str, Any] = {}  # split → honing.data.report.DataReport, filled by build_data

    # --- the overridable steps ------------------------------------------------------
    def build_device(self) -> torch.device:
        """The device from ``trainer.device`` (``auto``: this rank's GPU if there is one)."""
        choice = self.config.trainer.device
        if choice == "cuda" and not torch.cuda.is_available():
            raise ConfigError("trainer.device: 'cuda' was asked for but no CUDA device is available")
        return default_device() if choice == "auto" else torch.device(choice)

    def build_tokenizer(self) -> Any:
        """The tokenizer (method recipes decide where its training text comes from)."""
        raise NotImplementedError

    def tokenizer_kind(self) -> tuple[str, str | None]:
        """``tokenizer.kind`` and ``tokenizer.path`` with ``auto`` resolved: the model's own tokenizer
        when ``model.name_or_path`` is set, else byte-level."""
        cfg = self.config.tokenizer
        if cfg.kind != "auto":
            return cfg.kind, cfg.path or (self.config.model.name_or_path if cfg.kind == "pretrained" else None)
        if cfg.path or self.config.model.name_or_path:
            return "pretrained", cfg.path or self.config.model.name_or_path
        return "byte", None

    def build_model(self) -> torch.nn.Module:
        """The model from ``model.name_or_path`` or ``model.config``, on the run's device and dtype."""
        cfg = self.config.model
        if cfg.dtype is not None:
            dtype = getattr(torch, cfg.dtype)
        else:
            dtype = torch.bfloat16 if self.config.trainer.precision == "bf16" else torch.float32
        if cfg.name_or_path:
            model = load_pretrained_model(cfg.name_or_path, attn_implementation=cfg.attn_implementation,
                                          dtype=dtype, trust_remote_code=cfg.trust_remote_code)
        else:
            tokenizer = self.tokenizer
            model_config = build_model_config(
                cfg.config or {}, vocab_size=len(tokenizer), max_position_embeddings=self.max_length(),
                special_token_ids={"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id,
                                   "bos_token_id": tokenizer.bos_token_id})
            model = build_model_from_config(model_config, attn_implementation=cfg.attn_implementation, dtype=dtype)
        rows = model.get_input_embeddings().weight.shape[0]
        if self.tokenizer is not None and len(self.tokenizer) > rows:
            # e.g. chat-template special tokens added to a pretrained tokenizer: the new rows are
            # initialised by transformers (mean of the old embeddings) and trained
            log.info("resizing the model's embeddings from %d to %d tokens to fit the tokenizer", rows,
                     len(self.tokenizer))
            model.resize_token_embeddings(len(self.tokenizer))
        return model.to(self.device)

    def max_length(self) -> int:
        """The longest sequence the model must handle."""
        return self.config.data.seq_len

    def freeze_module(self, model: torch.nn.Module) -> None:
        """Freeze parameters before the optimizer is built (none by default)."""

    def build_parallel(self, model: torch.nn.Module) -> torch.nn.Module:
        """Apply ``parallel.*`` from outside the model: activation checkpointing, per-block compile, then
        DDP or FSDP2 (``auto``: FSDP2 with several processes). Returns the model to train."""
        cfg = self.config.parallel
        return parallelize(model, strategy=cfg.strategy, world_size=get_world_size(), device=self.device,
                           reshard_after_forward=cfg.reshard_after_forward,
                           activation_checkpointing=cfg.activation_checkpointing,
                           activation_checkpointing_every=cfg.activation_checkpointing_every, compile=cfg.compile,
                           mixed_precision=cfg.mixed_precision, precision=self.config.trainer.precision)

    def build_optimizer(self, model: torch.nn.Module) -> torch.optim.Optimizer:
        """AdamW with decay / no-decay parameter groups."""
        cfg = self.config.optim
        return build_adamw(model, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=tuple(cfg.betas),
                           eps=cfg.eps, fused=cfg.fused)

    def build_data(self) -> tuple[Any, Any]:
        """The training DataLoader and the validation batches (or None)."""
        raise NotImplementedError

    def build_train_module(self) -> Any:
        """The method's TrainModule around the model and optimizer (next-token loss by default)."""
        from honing.methods.lm import LMTrainModule

        sched = self.config.scheduler
        return LMTrainModule(
            self.model, self.build_optimizer(self.model), micro_batch_size=self.micro_batch_size(),
            scheduler={"name": sched.name, "warmup_steps": sched.warmup_steps, "min_lr_ratio": sched.min_lr_ratio,
                       "decay_fraction": sched.decay_fraction},
            grad_clip=self.config.optim.grad_clip, precision=self.config.trainer.precision, device=self.device)

    def micro_batch_size(self) -> int:
        """Rows per forward pass on each rank (defaults to the whole per-rank batch)."""
        local = self.config.data.global_batch_size // get_world_size()
        return min(self.config.data.micro_batch_size or local, local)

    def generate_text(self, prompt: str) -> str:
        """Sample a continuation of ``prompt`` from the model (for the end-of-run sample)."""
        cfg = self.config.callbacks.sample
        ids = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"].to(self.device)
        out = self.generate(ids, max_new_tokens=cfg.max_new_tokens, do_sample=cfg.temperature > 0,
                            temperature=cfg.temperature or None, top_k=50)
        return self.tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)

    def generate(self, ids: torch.Tensor, **generate_kwargs: Any) -> torch.Tensor:
        """``model.generate`` on one prompt's ids in eval mode, the model's mode restored afterwards
        (samples and generation evals run between training steps).

        Under DDP the wrapped model generates on its own; under FSDP2 every rank runs this (the
        callbacks call it on all ranks) and transformers keeps their forwards in step (synced_gpus).
        """
        model = unwrap_model(self.model)
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                return model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                      pad_token_id=self.tokenizer.pad_token_id, **generate_kwargs)
        finally:
            model.train(was_training)

    def export(self, out_dir: str) -> None:
        """Write the trained model and tokenizer as a Hugging Face folder: every rank gathers sharded
        (FSDP2) weights, rank 0 writes."""
        state_dict = full_state_dict(self.model) if is_fsdp(self.model) else None
        if is_rank0():
            export_hf(self.model, self.tokenizer, out_dir, state_dict=state_dict)

    def build_callbacks(self) -> dict[str, Callback]:
        """The built-in callbacks the config enables, then the user's own."""
        cfg = self.config.callbacks
        callbacks: dict[str, Callback] = {
            "checkpointer": CheckpointerCallback(
                save_interval=cfg.checkpointer.save_interval, keep_last=cfg.checkpointer.keep_last,
                ephemeral_save_interval=cfg.checkpointer.ephemeral_save_interval,
                async_save=cfg.checkpointer.async_save),
            "metrics_file": MetricsFileCallback(),
            "export": ExportCallback(self.export),
        }
        if cfg.console.enabled:
            callbacks["console"] = ConsoleCallback(log_interval=cfg.console.log_interval, plain=cfg.console.plain)
        if cfg.speed_monitor.enabled:
            callbacks["speed_monitor"] = SpeedMonitorCallback(
                seq_len=self.config.data.seq_len, peak_flops=cfg.speed_monitor.peak_flops,
                precision=self.config.trainer.precision, device=self.device)
        if cfg.garbage_collector.enabled:
            callbacks["garbage_collector"] = GarbageCollectorCallback(interval=cfg.garbage_collector.interval)
        if cfg.evaluator.enabled and self.eval_batches is not None:
            callbacks["evaluator"] = EvaluatorCallback(batches=self.eval_batches, interval=cfg.evaluator.interval,
                                                       max_batches=cfg.evaluator.max_batches)
        if cfg.sample.enabled and cfg.sample.prompts:
            callbacks["sample"] = TextSampleCallback(self.generate_text, prompts=cfg.sample.prompts,
                                                     interval=cfg.sample.interval, printer=self.print)
        callbacks.update(self.build_tracking_callbacks())
        if cfg.upload.enabled and cfg.upload.save_path:
            storage_cfg = self.config.storage
            callbacks["upload"] = CheckpointUploadCallback(
                cfg.upload.save_path, retry_initial_seconds=storage_cfg.retry_initial_seconds,
                retry_max_seconds=storage_cfg.retry_max_seconds)
        for index, custom in enumerate(cfg.custom):
            callbacks[f"custom{index}"] = load_callback(custom.import_path, custom.kwargs,
                                                        key=f"callbacks.custom[{index}]")
        return callbacks

    def build_tracking_callbacks(self) -> dict[str, Callback]:
        """W&B, TensorBoard and the profiler, each when the config enables it."""
        cfg = self.config.callbacks
        callbacks: dict[str, Callback] = {}
        run_config = self.config.model_dump(mode="json")  # the trackers redact secrets themselves
        if cfg.wandb.enabled:
            callbacks["wandb"] = WandbCallback(
                project=cfg.wandb.project, entity=cfg.wandb.entity, name=cfg.wandb.name or self.config.run_name,
                tags=cfg.wandb.tags, group=cfg.wandb.group, mode=cfg.wandb.mode, api_key=cfg.wandb.api_key,
                config=run_config)
        if cfg.tensorboard.enabled:
            callbacks["tensorboard"] = TensorBoardCallback(config=run_config)
        if cfg.profiler.enabled:
            callbacks["profiler"] = ProfilerCallback(start=cfg.profiler.start, stop=cfg.profiler.stop)
        return callbacks

    def checkpoint_files(self) -> dict[str, str | bytes]:
        """Files saved in every checkpoint: the run's config, model config and tokenizer."""
        files: dict[str, str | bytes] = {"config.yaml": to_yaml(self.config)}
        files.update(folder_files(lambda d: unwrap_model(self.model).config.save_pretrained(d), "model"))
        if self.tokenizer is not None:
            files.update(folder_files(self.tokenizer.save_pretrained, "tokenizer"))
        return files

    def configure_storage(self) -> None:
        """Credentials and endpoint from ``storage.*`` for every ``s3://`` path of this process."""
        cfg = self.config.storage
        storage.set_storage_options("s3", **storage.s3_storage_options(
            endpoint_url=cfg.endpoint_url, aws_access_key_id=cfg.aws_access_key_id,
            aws_secret_access_key=cfg.aws_secret_access_key, region=cfg.region))

    def build_trainer(self) -> Trainer:
        """The Trainer over the train module and data loader."""
        cfg, storage_cfg = self.config.trainer, self.config.storage
        trainer = TrainerConfig(
            save_folder=cfg.save_folder, max_duration=cfg.max_duration, hard_stop=cfg.hard_stop,
            load_path=cfg.load_path, load_strategy=cfg.load_strategy,
            metrics_collect_interval=cfg.metrics_collect_interval, cancel_check_interval=cfg.cancel_check_interval,
            steps_to_skip=[StepSkipRange(r.start, r.stop) for r in cfg.steps_to_skip],
            save_overwrite=cfg.save_overwrite, callbacks=self.build_callbacks(),
            extra_checkpoint_files=self.checkpoint_files(),
            model_params=count_parameters(self.model),
        ).build(self.train_module, self.train_loader)
        # where a remote save folder is staged, and how its uploads retry and are waited for
        trainer.checkpointer.work_dir = storage_cfg.work_dir
        trainer.checkpointer.upload_wait_seconds = storage_cfg.upload_wait_seconds
        trainer.checkpointer.uploader.retry_initial_seconds = storage_cfg.retry_initial_seconds
        trainer.checkpointer.uploader.retry_max_seconds = storage_cfg.retry_max_seconds
        return trainer

    # --- running ----------------------------------------------------------------------
    def build(self) -> Trainer:
        """Run every build step in order and return the Trainer."""
        self.configure_storage()
        self.tokenizer = self.build_tokenizer()
        self.model = self.build_model()
        self.freeze_module(self.model)
        self.model = self.build_parallel(self.model)
        self.train_loader, self.eval_batches = self.build_data()
        self.train_module = self.build_train_module()
        self.trainer = self.build_trainer()
        self.save_config()
        total, trainable = count_parameters(self.model), count_parameters(self.model, trainable_only=True)
        share = "" if trainable == total else f" ({trainable:,} trainable)"
        self.print(f"model: {total:,} parameters{share} | device {self.device} | "
                   f"precision {self.config.trainer.precision} | save folder {self.config.trainer.save_folder}")
        return self.trainer

    def save_config(self) -> None:
        """Write the resolved config, secrets redacted, to ``SAVE_FOLDER/config.yaml``."""
        if is_rank0():
            self.trainer.write_file("config.yaml", to_yaml(self.config))  # creates the folder

    def run(self) -> Trainer:
        """Prepare the environment, build, train, tear down."""
        if self.config.trainer.num_threads:
            torch.set_num_threads(self.config.trainer.num_threads)
        prepare_training_environment(seed=self.config.trainer.seed,
                                     timeout=timedelta(seconds=self.config.parallel.timeout_seconds))
        try:
            trainer = self.build()
            trainer.fit()
            if trainer.canceled:
                self.print(f"run canceled ({trainer.cancel_reason}); saved a checkpoint at step "
                           f"{trainer.global_step}: run the same command again to resume")
            return trainer
        finally:
            teardown_training_environment()

    @staticmethod
    def print(message: str) -> None:
        """Print on rank 0 only."""
        if is_rank0():
            print(message, flush=True)


def folder_files(save: Any, prefix: str) -> dict[str, bytes]:
    """Run ``save(dir)`` into a temporary folder and return its files as ``prefix/name`` → bytes."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        save(tmp)
        out = {}
        for name in sorted(os.listdir(tmp)):
            with open(os.path.join(tmp, name), "rb") as handle:
                out[f"{prefix}/{name}"] = handle.read()
        return out


def load_callback(import_path: str, kwargs: dict[str, Any], *, key: str) -> Callback:
    """Import ``package.module:ClassName`` and instantiate it with ``kwargs``."""
    module_name, _, class_name = import_path.partition(":")
    try:
        module = importlib.import_module(module_name)
        cls = getattr(module, class_name)
    except (ImportError, AttributeError) as error:
        raise ConfigError(f"{key}.import_path: cannot import {import_path!r}: {error}") from None
    if not (isinstance(cls, type) and issubclass(cls, Callback)):
        raise ConfigError(f"{key}.import_path: {import_path!r} is not a honing.train.Callback subclass")
    return cls(**kwargs)
