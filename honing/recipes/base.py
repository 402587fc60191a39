"""The recipe: a method's spec, the build steps that ``honing.recipes.build_run.build_run`` calls in order.

The parts: the model assets (``honing.run.parts.ModelAssets``), the model builder (``honing.models.builder``), the
method's row kind and its data (``honing.data.row_kind``, ``honing.data.finetune_data``), the reference model, the
train module (``honing.methods``), the callbacks (``honing.run.callbacks``) and the Trainer. A method's recipe picks
its parts; each step takes what it needs as arguments, returns what it made, and is a hook a user may replace in a
subclass (``build_model_assets``, ``freeze_module``, ``finish_data``, ``build_param_groups``, ``post_init``). A class
whose steps are written in another system's form is adapted as it is defined, by the adapters ``honing.interop``
registers (``honing.extensions``); such steps read the parts ``share`` keeps on the recipe. The config is never
changed: ``saved_config`` is what the run applied.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import tempfile
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import torch

from honing import extensions
from honing.config import RunConfig, to_yaml
from honing.config.methods import dropout_disabled
from honing.config.trainer_schema import TrainerSection
from honing.data.collate import packed_collate
from honing.data.finetune_data import DataPlacement, RunData, build_finetune_data
from honing.data.text.corpus import default_cache_dir
from honing.distributed import (
    default_device,
    get_world_size,
    is_rank0,
    prepare_training_environment,
    print0,
    teardown_training_environment,
)
from honing.errors import ConfigError
from honing.export.model_card import DATA_FILE
from honing.models import count_parameters, freeze_layers, is_lora, unwrap_model
from honing.models.builder import ModelBuilder
from honing.models.compile_choice import allow_eager_fallback, choose_compile
from honing.models.float8 import FP8, check_fp8_device, convert_linears_to_float8, precompute_scales_after_steps
from honing.models.model_parallel import check_model_layout
from honing.models.parallel import fsdp_shards, parallelize_from, resolve_strategy
from honing.optim.builder import OptimizerSettings, build_optimizer
from honing.optim.schedulers import schedule_options
from honing.parallel_dims import ParallelDims, check_divides, parallel_dims_from
from honing.plan.auto_checkpointing import choose_activation_checkpointing
from honing.recipes.build_run import build_run
from honing.run.callbacks import build_callbacks
from honing.run.outputs import RunOutputs
from honing.run.parts import HeldOutAnswers, ModelAssets, Placement, RunParts, TrainInputs
from honing.train import Callback, Trainer
from honing.train.cpu_load import choose_num_threads, current_load
from honing.train.precision import choose_precision

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from honing.data.row_kind import RowKind
    from honing.methods.base import BaseTrainModule

log = logging.getLogger(__name__)

#: a method's row kind, as a helper that builds one returns it
Rows = TypeVar("Rows")


class StepTransform(Protocol):
    """What a kind of model changes in any method's steps (vision: its tower frozen, its own learning rate), listed
    by a recipe in ``step_transforms`` instead of mixed into its bases."""

    def freeze(self, recipe: Recipe, model: torch.nn.Module) -> None:
        """Freeze what this kind of model keeps frozen, after ``model.freeze_layers``."""

    def param_groups(self, recipe: Recipe) -> list[dict[str, Any]]:
        """The parameter groups it adds after ``optim.param_groups``."""


class Recipe:
    """A method's spec: its build steps, which ``build_run`` calls in order, each given what it needs; ``run()``
    builds and trains."""

    #: what generates text and exports the trained model (the callbacks call it)
    outputs_class: type[RunOutputs] = RunOutputs
    #: transforms of the steps below that the method's kind of model brings, applied in order
    step_transforms: tuple[StepTransform, ...] = ()

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        extensions.adapt_recipe_class(cls)  # steps written in another system's form take honing's arguments

    def __init__(self, config: RunConfig):
        self.config = config
        self.saved_config = config  # the config as the run applied it (written to config.yaml)
        self.device = run_device(config.trainer.device)
        self.precision = run_precision(config.trainer, self.device)
        self.models = ModelBuilder(
            config.model,
            device=self.device,
            precision=self.precision,
            packed_rows=self.packed_rows(),
            disable_dropout=dropout_disabled(config),
        )
        self.cache_dir = config.data.cache_dir or default_cache_dir()
        if config.recipe is not None and f"{type(self).__module__}:{type(self).__qualname__}" != config.recipe:
            raise ConfigError(
                f"recipe: the config names {config.recipe!r} but {type(self).__name__} runs it; build the recipe "
                "with honing.recipes.recipe_for(config)"
            )

    @functools.cached_property
    def parallel_dims(self) -> ParallelDims:
        """The run's parallel layout (``parallel.dp_replicate / dp_shard / tp / cp / ep``) over the processes that
        joined, checked against ``data.seq_len`` and its mesh built on first use."""
        dims = parallel_dims_from(self.config.parallel, get_world_size())
        check_divides("data.seq_len", self.config.data.seq_len, "cp", dims.cp)
        dims.build_mesh(self.device.type)
        return dims

    @property
    def placement(self) -> Placement:
        """Where the run computes: device, precision, parallel layout."""
        return Placement(self.device, self.precision, self.parallel_dims)

    def packed_rows(self) -> bool:
        """Whether training rows hold several documents told apart by restarting ``position_ids`` (those are what
        ``model.attn_implementation: auto`` picks a varlen kernel for on CUDA)."""
        return False

    # --- the run, top to bottom -------------------------------------------------------
    def build(self) -> Trainer:
        """Run every build step in order (``honing.recipes.build_run``) and return the Trainer."""
        _, trainer = build_run(self.config, self)
        self.share(trainer=trainer)
        self.post_init()
        return trainer

    def share(self, **parts: Any) -> None:
        """Keep parts on the recipe as they are made, as steps written in another system's form read them
        (``self.processor``, ``self.model``, ``self.train_module``, ``self.trainer``, ...); honing's own steps take
        them as arguments instead."""
        for name, value in parts.items():
            setattr(self, name, value)

    def run(self) -> Trainer:
        """Prepare the environment, build, train, tear down."""
        torch.set_num_threads(num_threads(self.config.trainer.num_threads))
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
            print0(
                f"run canceled ({trainer.cancel_reason}); saved a checkpoint at step "
                f"{trainer.global_step}: run the same command again to resume"
            )
        return trainer

    # --- the steps (hooks a subclass may replace) ---------------------------------------
    def model_assets(self) -> ModelAssets:
        """The run's tokenizer or processor (and the chat template of chat methods)."""
        raise NotImplementedError

    def build_model_assets(self) -> list[Any]:
        """The model assets, kept as ``self.processor``, ``self.tokenizer`` and
        ``self.chat_template``; returns ``[processor]``."""
        assets = self.model_assets()
        self.share(processor=assets.processor, tokenizer=assets.tokenizer, chat_template=assets.chat_template)
        return [assets.processor]

    def build_model(self, assets: ModelAssets) -> torch.nn.Module:
        """The model from ``model.name_or_path`` or ``model.config``, on the run's device and dtype."""
        shards = fsdp_shards(self.config.parallel.strategy, self.parallel_dims)
        return self.models.causal_lm(assets.tokenizer, max_length=self.config.data.seq_len, shards=shards)

    def freeze_module(self, model: torch.nn.Module) -> None:
        """Freeze parameters by ``model.freeze_layers`` patterns, then each step transform's, before the optimizer
        is built."""
        if self.config.model.freeze_layers:
            freeze_layers(model, self.config.model.freeze_layers, missing=self.config.model.freeze_missing)
        for transform in self.step_transforms:
            transform.freeze(self, model)

    def build_parallel(self, model: torch.nn.Module) -> torch.nn.Module:
        """Apply ``parallel.*`` from outside the model: activation checkpointing, per-block compile, then
        DDP or FSDP2 (``auto``: FSDP2 with several processes). Returns the model to train."""
        check_model_layout(model, self.parallel_dims, lora=is_lora(model), seq_len=self.config.data.seq_len)
        if self.precision == FP8:
            use_float8_linears(model, self.config.parallel.strategy)
        vocab = getattr(getattr(unwrap_model(model), "config", None), "vocab_size", None)
        checkpointing = choose_activation_checkpointing(
            self.config, device=self.device, nproc=get_world_size(), vocab_size=vocab
        )
        if checkpointing.line:
            print0(checkpointing.line)
        choice = choose_compile(self.config.parallel.compile, self.device, self.compile_blockers())
        print0(choice.line)
        if choice.enabled and choice.automatic:
            allow_eager_fallback()
        return parallelize_from(
            model,
            self.config.parallel,
            dims=self.parallel_dims,
            device=self.device,
            precision=self.precision,
            compile_blocks=choice.enabled,
            checkpointing=(checkpointing.mode, checkpointing.every),
        )

    def compile_blockers(self) -> list[str]:
        """What in this method's step would recompile compiled blocks every step (turns ``parallel.compile: auto``
        off): packed preference pairs, by default."""
        return ["packed preference pairs"] if getattr(self, "packed_pairs", False) else []

    def build_reference_model(self, model: torch.nn.Module, assets: ModelAssets) -> torch.nn.Module | None:
        """A frozen model the method compares against (DPO, GRPO's KL), from the unparallelised ``model``; none by
        default."""
        return None

    def row_kind(self, assets: ModelAssets) -> RowKind:
        """The method's row kind over the run's tokenizer or processor."""
        raise NotImplementedError

    def build_data(self, assets: ModelAssets, model: torch.nn.Module | None = None) -> RunData:
        """The training loader, the validation batches and the data reports, through the method's row kind
        (``model``: the model to train, None where only the data is built: ``honing data``)."""
        return finetune_data(self.row_kind(assets), self.config, self.parallel_dims, self.cache_dir)

    def finish_data(self, data: RunData) -> RunData:
        """The data after the recipe's own last steps on it (its items transformed, another collator), before the
        train module is built; the data as it is by default."""
        return data

    def build_param_groups(self) -> list[dict[str, Any]]:
        """Parameter groups by name pattern (``{"params": patterns, "lr": ..., "weight_decay": ...}``), first match
        first, the rest split by decay: ``optim.param_groups``, then each step transform's."""
        groups = [group.model_dump() for group in self.config.optim.param_groups]
        return groups + [group for transform in self.step_transforms for group in transform.param_groups(self)]

    def build_optimizer(self, model: torch.nn.Module) -> torch.optim.Optimizer:
        """``optim.name``'s optimizer (AdamW by default) with decay / no-decay groups and the parameter groups of
        ``build_param_groups``."""
        settings = OptimizerSettings.from_config(self.config.optim, offload=self.config.parallel.offload == "optimizer")
        optimizer = build_optimizer(model, settings, groups=self.build_param_groups())
        if self.precision == FP8:
            precompute_scales_after_steps(model, optimizer)
        return optimizer

    def build_train_module(self, inputs: TrainInputs) -> BaseTrainModule:
        """The method's TrainModule around the model and optimizer (next-token loss by default, plus an MoE model's
        router load-balancing loss)."""
        from honing.methods.lm import LMTrainModule

        return LMTrainModule(
            inputs.model,
            self.build_optimizer(inputs.model),
            router_aux_loss_coef=self.config.model.router_aux_loss_coef,  # MoE models' load-balancing loss
            neftune_noise_alpha=self.config.sft.neftune_noise_alpha if self.config.sft else None,  # SFT's NEFTune
            **train_module_options(self.config, self.placement, inputs.data.collator),
        )

    def build_callbacks(self, parts: RunParts) -> dict[str, Callback]:
        """The registered callbacks the config enables (``honing.run.callbacks``), then the user's own."""
        return build_callbacks(parts)

    def build_trainer(self, parts: RunParts) -> Trainer:
        """The Trainer over the train module and data loader: it takes the config's trainer and storage sections;
        callbacks written with another system's event names are adapted to honing's as they are registered, by the
        callback adapters ``honing.interop`` registers (``honing.extensions``)."""
        return Trainer(
            self.config.trainer,
            storage=self.config.storage,
            train_module=parts.train_module,
            data_loader=parts.data.train_loader,
            callbacks=self.build_callbacks(parts),
            extra_checkpoint_files=checkpoint_files(parts),
            model_params=count_parameters(parts.model, non_embedding=True),
            callback_adapter=extensions.adapt_callback,
        )

    def post_init(self) -> None:
        """Called once everything is built, before training."""

    def held_out_answers(self, assets: ModelAssets) -> HeldOutAnswers:
        """``(prompt, expected answer)`` pairs for the generation eval (none by default)."""
        return []


# --- what every recipe shares, as functions of the config ------------------------------
def run_device(choice: str) -> torch.device:
    """The device from ``trainer.device`` (``auto``: this rank's GPU if there is one)."""
    if choice == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "trainer.device: 'cuda', but this machine has no CUDA device; set trainer.device: auto (or cpu)"
        )
    return default_device() if choice == "auto" else torch.device(choice)


def run_precision(trainer: TrainerSection, device: torch.device) -> str:
    """``trainer.precision``, unless it asks for bf16 on a CPU that only emulates it (see
    ``honing.train.precision``): then a warning with the measured slowdown, or fp32 by policy. ``fp8`` is refused
    here, before any model is read, on a device without float8 matmuls."""
    if trainer.precision == FP8:
        check_fp8_device(device)
    choice = choose_precision(trainer.precision, device, policy=trainer.emulated_bf16)
    if choice.warning and is_rank0():
        log.warning(choice.warning)
    return choice.precision


def use_float8_linears(model: torch.nn.Module, strategy: str) -> None:
    """``trainer.precision: fp8``: the blocks' linear layers to torchao's float8 ones, said in one line."""
    if is_lora(model):
        raise ConfigError("trainer.precision: fp8 does not combine with model.lora yet: use bf16-mixed")
    fsdp = resolve_strategy(strategy, get_world_size()) == "fsdp"
    count = convert_linears_to_float8(unwrap_model(model), fsdp_float8_all_gather=fsdp)
    print0(f"trainer.precision: fp8 -> {count} linear layers in float8 (torchao, tensorwise scales); the LM head bf16")


def micro_batch_size(config: RunConfig, dims: ParallelDims) -> int:
    """Rows per forward pass on each rank (defaults to the whole per-rank batch)."""
    local = config.data.rows_per_step(dims.dp_size) // dims.dp_size
    return min(config.data.micro_batch_size or local, local)


def data_placement(config: RunConfig, dims: ParallelDims, cache_dir: str) -> DataPlacement:
    """This process's slice of the data: seed, data-parallel rank and size, validation batch rows, cache."""
    return DataPlacement(
        seed=config.trainer.seed,
        rank=dims.dp_rank,
        world_size=dims.dp_size,
        eval_batch_size=config.callbacks.evaluator.batch_size or micro_batch_size(config, dims),
        cache_dir=cache_dir,
        progress=show_progress(),
    )


def finetune_data(kind: RowKind, config: RunConfig, dims: ParallelDims, cache_dir: str, **options: Any) -> RunData:
    """The training loader, the validation batches and the data reports of ``kind``'s rows, this process's slice
    (``options``: ``build_finetune_data``'s own, a ``finish`` step or ``validation``)."""
    return build_finetune_data(kind, config.data, data_placement(config, dims, cache_dir), **options)


def train_module_options(config: RunConfig, placement: Placement, collator: Any) -> dict[str, Any]:
    """The step settings every method's TrainModule takes (``honing.methods.base.BaseTrainModule``)."""
    return dict(
        micro_batch_size=micro_batch_size(config, placement.parallel_dims),
        scheduler=schedule_options(config.scheduler, config.optim.lr),
        grad_clip=config.optim.grad_clip,
        precision=placement.precision,
        device=placement.device,
        collator=collator,
        chunked_loss=config.model.chunked_loss,
        parallel_dims=placement.parallel_dims,
    )


def show_progress() -> bool:
    """A progress bar while rows are prepared: on an interactive terminal."""
    return sys.stderr.isatty()


def chat_assets(config: RunConfig) -> ModelAssets:
    """The chat methods' model assets: a byte-level or pretrained tokenizer with the run's chat template (and its
    special tokens)."""
    from honing.data.chat.chat_tokenizer import chat_tokenizer

    tokenizer, chat_template = chat_tokenizer(config.tokenizer, config.data, config.model)
    return ModelAssets(processor=tokenizer, tokenizer=tokenizer, chat_template=chat_template)


def chat_rows(
    kind: Callable[..., Rows], assets: ModelAssets, config: RunConfig, cache_dir: str, **options: Any
) -> Rows:
    """The chat methods' row kind ``kind`` over the run's tokenizer and chat template, its ``data`` section and the
    cache folder (``options``: what the kind takes besides)."""
    return kind(assets.tokenizer, assets.chat_template, config.data, cache_dir=cache_dir, printer=print0, **options)


def chat_packed_collate(models: ModelBuilder) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
    """The collator of packed rows for the attention kernel the model builder chose."""
    return packed_collate(models.attention.name if models.attention else None)


def stop_token_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Where a sampled completion ends: the end-of-sequence and the chat template's end-of-turn tokens."""
    from honing.models.generation import end_of_turn_ids

    return [int(i) for i in (tokenizer.eos_token_id, *end_of_turn_ids(tokenizer)) if i is not None]


def checkpoint_files(parts: RunParts) -> dict[str, str | bytes]:
    """Files saved in every checkpoint: the run's config, its data summary, the model config and tokenizer."""
    files: dict[str, str | bytes] = {"config.yaml": to_yaml(parts.config)}
    files[DATA_FILE] = json.dumps(parts.outputs.data_summary(), indent=2)  # what the model card of an export says
    files.update(folder_files(lambda d: unwrap_model(parts.model).config.save_pretrained(d), "model"))
    if parts.assets.processor is not None:
        files.update(folder_files(parts.assets.processor.save_pretrained, "tokenizer"))
    return files


def folder_files(save: Callable[[str], Any], prefix: str) -> dict[str, bytes]:
    """Run ``save(dir)`` into a temporary folder and return its files as ``prefix/name`` → bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        save(tmp)
        out = {}
        for name in sorted(os.listdir(tmp)):
            with open(os.path.join(tmp, name), "rb") as handle:
                out[f"{prefix}/{name}"] = handle.read()
        return out


def num_threads(configured: int | None) -> int:
    """The CPU threads torch uses: ``trainer.num_threads``, else ``OMP_NUM_THREADS`` (torchrun sets it to 1 for
    several ranks a machine), else the cores other processes leave free, said in one info line."""
    if configured:
        return configured
    if os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads()  # torch read it at start: the user's (or torchrun's) choice stands
    threads, why = choose_num_threads(current_load())
    log.info(why)
    return threads
