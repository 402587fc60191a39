"""The recipe: turns a RunConfig into model assets, data, a TrainModule, callbacks and a Trainer.

Each ``build_*`` step is a method so a user can subclass a recipe and replace one step
(VeOmni's pattern); method recipes differ from this base only where the method differs.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
from datetime import timedelta
from typing import Any

import torch

from honing import storage
from honing.config import RunConfig, to_yaml
from honing.data.transformed import TransformedDataset
from honing.distributed import (
    default_device,
    get_world_size,
    is_rank0,
    prepare_training_environment,
    teardown_training_environment,
)
from honing.errors import ConfigError
from honing.export.model_card import DATA_FILE
from honing.models import (
    apply_lora,
    build_model_config,
    build_model_from_config,
    count_parameters,
    freeze_layers,
    is_lora,
    load_pretrained_model,
    unwrap_model,
)
from honing.models.attention_choice import AttentionChoice
from honing.models.model_parallel import check_model_layout
from honing.models.parallel import fsdp_shards, parallelize
from honing.models.quantize import check_has_lora, quantize_base
from honing.models.quantized_loading import quantizing_load_options
from honing.optim.builder import OptimizerSettings, build_optimizer
from honing.parallel_dims import ParallelDims, check_divides, parallel_dims_from
from honing.recipes.attention_setup import AttentionSetup
from honing.recipes.callbacks import build_callbacks
from honing.recipes.model_outputs import ModelOutputs
from honing.train import Callback, Trainer, TrainerConfig
from honing.train.common import StepSkipRange
from honing.train.precision import choose_precision, describe_device
from honing.train.shared_folder import check_shared_folder

log = logging.getLogger(__name__)


class Recipe(AttentionSetup, ModelOutputs):
    """Build everything a run needs from its config, then ``run()`` it."""

    def __init__(self, config: RunConfig):
        self.config = config
        self.device = self.build_device()
        self.precision = self.build_precision()
        self.processor: Any = None  # a tokenizer, or a multimodal processor holding one
        self.tokenizer: Any = None
        self.model: torch.nn.Module | None = None
        self.attention: AttentionChoice | None = None  # the attention implementation build_model chose
        self.reference_model: torch.nn.Module | None = None
        self.collator: Any = None  # how the data's batches split into micro-batches (set by build_data)
        self.train_module: Any = None
        self.train_loader: Any = None
        self.eval_batches: Any = None
        self.trainer: Trainer | None = None
        self.data_reports: dict[str, Any] = {}  # split → honing.data.report.DataReport, filled by build_data
        self._parallel_dims: ParallelDims | None = None
        if config.recipe is not None and f"{type(self).__module__}:{type(self).__qualname__}" != config.recipe:
            raise ConfigError(
                f"recipe: the config names {config.recipe!r} but {type(self).__name__} runs it; build the recipe "
                "with honing.recipes.recipe_for(config)"
            )

    @property
    def parallel_dims(self) -> ParallelDims:
        """The run's parallel layout (``parallel.dp_replicate / dp_shard / tp / cp / ep``) over the processes that
        joined, its mesh built on first use: every consumer asks it for its own dimension."""
        if self._parallel_dims is None:
            dims = parallel_dims_from(self.config.parallel, get_world_size())
            self.check_layout(dims)
            dims.build_mesh(self.device.type)
            self._parallel_dims = dims
        return self._parallel_dims

    def check_layout(self, dims: ParallelDims) -> None:
        """Refuse a layout this method or its data cannot use, before any model is built (one line each)."""
        check_divides("data.seq_len", self.config.data.seq_len, "cp", dims.cp)

    # --- the overridable steps ------------------------------------------------------
    def build_device(self) -> torch.device:
        """The device from ``trainer.device`` (``auto``: this rank's GPU if there is one)."""
        choice = self.config.trainer.device
        if choice == "cuda" and not torch.cuda.is_available():
            raise ConfigError("trainer.device: 'cuda' was asked for but no CUDA device is available")
        return default_device() if choice == "auto" else torch.device(choice)

    def build_processor(self) -> Any:
        """The tokenizer, or a multimodal processor whose ``tokenizer`` attribute is one (method recipes
        decide where a trained tokenizer's text comes from)."""
        raise NotImplementedError

    def build_precision(self) -> str:
        """``trainer.precision``, unless it asks for bf16 on a CPU that only emulates it (see
        ``honing.train.precision``): then a warning with the measured slowdown, or fp32 by policy."""
        cfg = self.config.trainer
        choice = choose_precision(cfg.precision, self.device, policy=cfg.emulated_bf16)
        if choice.warning and is_rank0():
            log.warning(choice.warning)
        return choice.precision

    def build_model_assets(self) -> list[Any]:
        """The tokenizer or processor (VeOmni's step; sets ``self.processor`` and ``self.tokenizer``)."""
        self.setup_processor()
        return [self.processor]

    def build_data_transform(self) -> Any:
        """A function applied to every training and validation item before collation (None: the method's rows
        as they are); VeOmni's step, e.g. ``partial(process_sample, processor=self.processor)``."""
        return None

    def build_data_collate_info(self) -> Any:
        """The collator that splits a batch into micro-batches and names the model's inputs (VeOmni's step;
        by default the one ``build_data`` chose)."""
        return self.collator

    def post_init(self) -> None:
        """Called once everything is built, before training (VeOmni's step)."""

    def setup_processor(self) -> None:
        """Build the processor and keep its tokenizer (itself, for a plain tokenizer) as ``self.tokenizer``."""
        self.processor = self.build_processor()
        self.tokenizer = getattr(self.processor, "tokenizer", self.processor)

    def tokenizer_kind(self) -> tuple[str, str | None]:
        """``tokenizer.kind`` and ``tokenizer.path`` with ``auto`` resolved: the model's own tokenizer
        when ``model.name_or_path`` is set, else byte-level."""
        cfg = self.config.tokenizer
        if cfg.kind != "auto":
            return cfg.kind, cfg.path or (self.config.model.name_or_path if cfg.kind == "pretrained" else None)
        if cfg.path or self.config.model.name_or_path:
            return "pretrained", cfg.path or self.config.model.name_or_path
        return "byte", None

    def load_pretrained(self, dtype: torch.dtype, *, shards: int, auto_class: Any = None) -> torch.nn.Module:
        """``model.name_or_path`` in ``dtype`` (``auto_class``: transformers' Auto class, None for a causal LM);
        under ``model.quantize`` the decoder's linears are quantized as they are read."""
        cfg = self.config.model
        return load_pretrained_model(
            cfg.name_or_path,
            attn_implementation=self.attention_to_build(),
            dtype=dtype,
            trust_remote_code=cfg.trust_remote_code,
            auto_class=auto_class,
            **quantizing_load_options(
                cfg.quantize,
                name_or_path=cfg.name_or_path,
                auto_class=auto_class,
                trust_remote_code=cfg.trust_remote_code,
                device=self.device,
                shards=shards,
            ),
        )

    def build_model(self) -> torch.nn.Module:
        """The model from ``model.name_or_path`` or ``model.config``, on the run's device and dtype."""
        cfg = self.config.model
        if cfg.dtype is not None:
            dtype = getattr(torch, cfg.dtype)
        else:
            dtype = torch.bfloat16 if self.precision == "bf16" else torch.float32
        shards = fsdp_shards(self.config.parallel.strategy, self.parallel_dims)
        check_has_lora(cfg.quantize, cfg.lora)  # before a long load that would be refused
        if cfg.name_or_path:
            model = self.load_pretrained(dtype, shards=shards)
        else:
            tokenizer = self.tokenizer
            model_config = build_model_config(
                cfg.config or {},
                vocab_size=len(tokenizer),
                max_position_embeddings=self.max_length(),
                special_token_ids={
                    "eos_token_id": tokenizer.eos_token_id,
                    "pad_token_id": tokenizer.pad_token_id,
                    "bos_token_id": tokenizer.bos_token_id,
                },
            )
            model = build_model_from_config(model_config, attn_implementation=self.attention_to_build(), dtype=dtype)
        rows = model.get_input_embeddings().weight.shape[0]
        if self.tokenizer is not None and len(self.tokenizer) > rows:
            # e.g. chat-template special tokens added to a pretrained tokenizer: the new rows are
            # initialised by transformers (mean of the old embeddings) and trained
            log.info(
                "resizing the model's embeddings from %d to %d tokens to fit the tokenizer", rows, len(self.tokenizer)
            )
            model.resize_token_embeddings(len(self.tokenizer))
        quantize_base(model, cfg.quantize, cfg.lora, device=self.device, shards=shards)  # QLoRA's base
        model = self.set_attention(model.to(self.device))
        lora = cfg.lora
        if lora is not None:  # peft creates the adapters on the device of the layers they adapt
            model = apply_lora(
                model,
                rank=lora.rank,
                alpha=lora.alpha,
                dropout=lora.dropout,
                bias=lora.bias,
                target_modules=lora.target_modules,
                task_type=lora.task_type,
                modules_to_save=lora.modules_to_save,
            )
        return model

    def build_reference_model(self) -> torch.nn.Module | None:
        """A frozen model the method compares against (DPO, GRPO's KL); none by default."""
        return None

    def max_length(self) -> int:
        """The longest sequence the model must handle."""
        return self.config.data.seq_len

    def freeze_module(self, model: torch.nn.Module) -> None:
        """Freeze parameters by ``model.freeze_layers`` patterns before the optimizer is built."""
        if self.config.model.freeze_layers:
            freeze_layers(model, self.config.model.freeze_layers)

    def build_parallel(self, model: torch.nn.Module) -> torch.nn.Module:
        """Apply ``parallel.*`` from outside the model: activation checkpointing, per-block compile, then
        DDP or FSDP2 (``auto``: FSDP2 with several processes). Returns the model to train."""
        cfg = self.config.parallel
        check_model_layout(model, self.parallel_dims, lora=is_lora(model), seq_len=self.config.data.seq_len)
        return parallelize(
            model,
            strategy=cfg.strategy,
            dims=self.parallel_dims,
            device=self.device,
            reshard_after_forward=cfg.reshard_after_forward,
            activation_checkpointing=cfg.activation_checkpointing,
            activation_checkpointing_every=cfg.activation_checkpointing_every,
            compile=cfg.compile,
            mixed_precision=cfg.mixed_precision,
            precision=self.precision,
            offload=cfg.offload,
            activation_offload=cfg.activation_offload,
        )

    def build_optimizer(self, model: torch.nn.Module) -> torch.optim.Optimizer:
        """``optim.name``'s optimizer (AdamW by default) with decay / no-decay groups and the parameter groups of
        ``build_param_groups`` (the user's ``optim.param_groups``, then the method's own)."""
        settings = OptimizerSettings.from_config(self.config.optim, offload=self.config.parallel.offload == "optimizer")
        return build_optimizer(model, settings, groups=self.build_param_groups())

    def build_param_groups(self) -> list[dict[str, Any]]:
        """Parameter groups by name pattern (``{"params": patterns, "lr": ..., "weight_decay": ...}``), first match
        first, the rest split by decay (VeOmni's overridable step): ``optim.param_groups`` then the method's."""
        return [group.model_dump() for group in self.config.optim.param_groups] + self.extra_param_groups()

    def extra_param_groups(self) -> list[dict[str, Any]]:
        """Parameter groups a method adds after ``optim.param_groups`` (same form); none by default."""
        return []

    def build_data(self) -> tuple[Any, Any]:
        """The training DataLoader and the validation batches (or None)."""
        raise NotImplementedError

    def build_train_module(self) -> Any:
        """The method's TrainModule around the model and optimizer (next-token loss by default, plus an MoE model's
        router load-balancing loss)."""
        from honing.methods.lm import LMTrainModule

        return LMTrainModule(
            self.model,
            self.build_optimizer(self.model),
            router_aux_loss_coef=self.config.model.router_aux_loss_coef,  # MoE models' load-balancing loss
            **self.train_module_options(),
        )

    def train_module_options(self) -> dict[str, Any]:
        """The step settings every method's TrainModule takes (``honing.methods.base.BaseTrainModule``)."""
        sched = self.config.scheduler
        return dict(
            micro_batch_size=self.micro_batch_size(),
            scheduler={
                "name": sched.name,
                "warmup_steps": sched.warmup_steps,
                "warmup_ratio": sched.warmup_ratio,
                "min_lr_ratio": sched.min_lr_ratio,
                "decay_fraction": sched.decay_fraction,
            },
            grad_clip=self.config.optim.grad_clip,
            precision=self.precision,
            device=self.device,
            collator=self.collator,
            nonfinite_loss=self.config.trainer.nonfinite_loss,
            chunked_loss=self.config.model.chunked_loss,
            parallel_dims=self.parallel_dims,
        )

    def micro_batch_size(self) -> int:
        """Rows per forward pass on each rank (defaults to the whole per-rank batch)."""
        local = self.config.data.global_batch_size // self.parallel_dims.dp_size
        return min(self.config.data.micro_batch_size or local, local)

    def build_callbacks(self) -> dict[str, Callback]:
        """The registered callbacks the config enables (``honing.recipes.callbacks``), then the user's own."""
        return build_callbacks(self)

    def checkpoint_files(self) -> dict[str, str | bytes]:
        """Files saved in every checkpoint: the run's config, model config and tokenizer."""
        files: dict[str, str | bytes] = {"config.yaml": to_yaml(self.config)}
        files[DATA_FILE] = json.dumps(self.data_summary(), indent=2)  # what the model card of an export says
        files.update(folder_files(lambda d: unwrap_model(self.model).config.save_pretrained(d), "model"))
        if self.processor is not None:
            files.update(folder_files(self.processor.save_pretrained, "tokenizer"))
        return files

    def configure_storage(self) -> None:
        """Credentials and endpoint from ``storage.*`` for every ``s3://`` path of this process."""
        cfg = self.config.storage
        storage.set_storage_options(
            "s3",
            **storage.s3_storage_options(
                endpoint_url=cfg.endpoint_url,
                aws_access_key_id=cfg.aws_access_key_id,
                aws_secret_access_key=cfg.aws_secret_access_key,
                region=cfg.region,
            ),
        )

    def build_trainer(self) -> Trainer:
        """The Trainer over the train module and data loader."""
        cfg, storage_cfg = self.config.trainer, self.config.storage
        trainer = TrainerConfig(
            save_folder=cfg.save_folder,
            max_duration=cfg.max_duration,
            hard_stop=cfg.hard_stop,
            load_path=cfg.load_path,
            load_strategy=cfg.load_strategy,
            metrics_collect_interval=cfg.metrics_collect_interval,
            cancel_check_interval=cfg.cancel_check_interval,
            steps_to_skip=[StepSkipRange(r.start, r.stop) for r in cfg.steps_to_skip],
            save_overwrite=cfg.save_overwrite,
            load_trainer_state=cfg.load_trainer_state,
            load_optim_state=cfg.load_optim_state,
            nonfinite_loss=cfg.nonfinite_loss,
            callbacks=self.build_callbacks(),
            extra_checkpoint_files=self.checkpoint_files(),
            work_root=storage_cfg.work_folder,
            model_params=count_parameters(self.model, non_embedding=True),
        ).build(self.train_module, self.train_loader)
        # how a remote save folder's uploads retry and are waited for
        trainer.checkpointer.upload_wait_seconds = storage_cfg.upload_wait_seconds
        trainer.checkpointer.uploader.retry_initial_seconds = storage_cfg.retry_initial_seconds
        trainer.checkpointer.uploader.retry_max_seconds = storage_cfg.retry_max_seconds
        return trainer

    # --- running ----------------------------------------------------------------------
    def build(self) -> Trainer:
        """Run every build step in order and return the Trainer."""
        self.configure_storage()
        layout = self.parallel_dims.describe()  # a layout that cannot fit fails here, before any model is built
        self.build_model_assets()
        if self.tokenizer is None:  # a build_model_assets that set only the processor
            self.tokenizer = getattr(self.processor, "tokenizer", self.processor)
        try:
            self.model = self.build_model()
        except ValueError as error:  # transformers' word for an unknown kernel names no config key
            if "attn_implementation" not in str(error):
                raise
            raise ConfigError(f"model.attn_implementation: {error} honing also takes auto (the default).") from error
        if inspect.signature(self.freeze_module).parameters:
            self.freeze_module(self.model)
        else:  # VeOmni's freeze_module(self), which reads self.model
            self.freeze_module()
        self.model = self.build_parallel(self.model)
        # from_pretrained hands the model over in eval mode, while a wrapper built around it (peft's, DDP's) starts
        # in training mode, and the train module's "still training?" check reads the wrapper: without this, a
        # fine-tuned checkpoint trained with activation checkpointing and dropout off until the first evaluation
        self.model.train()
        self.reference_model = self.build_reference_model()
        self.train_loader, self.eval_batches = self.build_data()
        transform = self.build_data_transform()
        if transform is not None:
            parts = getattr(self.eval_batches, "parts", {"": self.eval_batches})  # several validation sources
            for data in (self.train_loader, *parts.values()):
                if hasattr(data, "dataset"):  # the loader and the validation batches read items from it
                    data.dataset = TransformedDataset(data.dataset, transform)
        self.collator = self.build_data_collate_info()
        if isinstance(self.collator, dict):  # VeOmni's per-key (pack dim, pad, ...) settings
            raise ConfigError(
                f"{type(self).__name__}.build_data_collate_info: returned a dict of per-key collate settings "
                "(VeOmni's form); honing's step returns the Collator itself (honing.data.collate): subclass the one "
                "super().build_data_collate_info() returns"
            )
        self.train_module = self.build_train_module()
        self.trainer = self.build_trainer()
        check_shared_folder(self.config.trainer.save_folder)  # several machines: one folder all of them see
        self.save_config()
        total, trainable = count_parameters(self.model), count_parameters(self.model, trainable_only=True)
        share = "" if trainable == total else f" ({trainable:,} trainable)"
        self.print(
            f"model: {total:,} parameters{share} | device {describe_device(self.device)} | "
            f"precision {self.precision} | attention {self.describe_attention()} | parallel {layout} | "
            f"save folder {self.config.trainer.save_folder}"
        )
        self.post_init()
        return self.trainer

    def save_config(self) -> None:
        """Write the resolved config, secrets redacted, to ``SAVE_FOLDER/config.yaml``."""
        if is_rank0():
            self.trainer.write_file("config.yaml", to_yaml(self.config))  # creates the folder

    def run(self) -> Trainer:
        """Prepare the environment, build, train, tear down."""
        if self.config.trainer.num_threads:
            torch.set_num_threads(self.config.trainer.num_threads)
        prepare_training_environment(
            seed=self.config.trainer.seed, timeout=timedelta(seconds=self.config.parallel.timeout_seconds)
        )
        try:
            trainer = self.build()
            trainer.fit()
        except BaseException:
            teardown_training_environment()  # a failed rank does not wait for peers that may be gone
            raise
        teardown_training_environment(wait_for_peers=True)
        if trainer.canceled:
            self.print(
                f"run canceled ({trainer.cancel_reason}); saved a checkpoint at step "
                f"{trainer.global_step}: run the same command again to resume"
            )
        return trainer

    @staticmethod
    def print(message: str) -> None:
        """Print on rank 0 only."""
        if is_rank0():
            print(message, flush=True)

    @staticmethod
    def warn(message: str) -> None:
        """Log a warning (every rank may warn)."""
        log.warning(message)


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
