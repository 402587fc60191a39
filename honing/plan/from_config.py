"""``honing plan CONFIG``: the memory estimate of the run a config describes, from the same config the run uses.

The model is built on the meta device (no memory) for its tensors; what one block saves for backward is measured
by running one and two blocks of the model's width over a few hundred tokens (the difference is one block's, per
token), so the estimate follows the model family's own code rather than a formula for Llama. Those blocks run on
fake tensors (shapes, no memory, no arithmetic: a 70B model's block is planned on a laptop in a second); a family
whose forward depends on values (a mixture of experts' routing) runs them for real on the host instead.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.multiprocessing.reductions import StorageWeakRef
from transformers import AutoModel, PretrainedConfig

from honing.config import RunConfig
from honing.models.loading import auto_model_class, build_model_config
from honing.models.model_parallel import check_model_layout
from honing.models.model_shape import pretrained_config
from honing.models.offload import check_offload
from honing.models.parallel import mixed_precision_policy, resolve_strategy
from honing.models.quantize import quantized_linears
from honing.parallel_dims import parallel_dims_from
from honing.plan.checkpointing_ladder import AUTO, checkpointing_for_budget
from honing.plan.estimate import (
    CHUNK_BYTES,
    CUDA_CHUNK_BYTES,
    MemoryEstimate,
    PlanInputs,
    Tensors,
    estimate,
    format_bytes,
    largest_micro_batch,
)
from honing.plan.rollout_batch import RankRollouts, rank_rollouts

if TYPE_CHECKING:
    from honing.config.model_schema import LoraSection

log = logging.getLogger(__name__)

MEASURE_TOKENS = 256  # tokens of the measuring forward: enough for per-token sizes, small for the host
CUDA_RUNTIME_BYTES = 1 << 30  # CUDA context, kernels and the caching allocator's slack (an allowance)


def model_config_of(config: RunConfig, vocab_size: int | None = None) -> PretrainedConfig:
    """The transformers config the run builds its model from."""
    cfg = config.model
    if cfg.name_or_path:  # offline, a hub name's carried model.shape
        return pretrained_config(cfg.name_or_path, shape=cfg.shape, trust_remote_code=cfg.trust_remote_code)
    if config.method == "vl_sft":  # the recipe's tiny vision-language configs (honing.models.tiny_vl)
        from honing.models.tiny_vl import tiny_vl_config

        options = dict(cfg.config or {})
        return tiny_vl_config(options.pop("model_type"), vocab_size=vocab_size, **options)
    return build_model_config(cfg.config or {}, vocab_size=vocab_size, max_position_embeddings=config.data.seq_len)


def meta_model(model_config: PretrainedConfig) -> nn.Module:
    """The model with meta tensors: shapes without memory."""
    with torch.device("meta"):
        return auto_model_class(model_config).from_config(model_config)


def tensors_of(model: nn.Module, config: RunConfig) -> Tensors:
    """The model's parameters by role, with the LoRA adapters and ``modules_to_save`` copies the run adds."""
    quantizable = {
        id(module.weight): module for _, module in quantized_linears(model, config.model.quantize_skip_modules)
    }
    seen: set[int] = set()
    sizes: dict[str, list[int]] = {"quantizable": [], "other": []}
    for param in model.parameters():
        if id(param) in seen:
            continue  # a tied head is the embeddings' tensor
        seen.add(id(param))
        sizes["quantizable" if id(param) in quantizable else "other"].append(param.numel())
    lora, copies = [], []
    section = lora_of(config)
    if section is not None:
        head = model.get_output_embeddings()
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear) and module is not head and targeted(name, section.target_modules):
                lora += [section.rank * module.in_features, section.rank * module.out_features]
        for wanted in section.modules_to_save or []:
            for name, module in model.named_modules():
                if name == wanted or name.endswith(f".{wanted}"):
                    copies += [p.numel() for p in module.parameters()]
    return Tensors(quantizable=sizes["quantizable"], other=sizes["other"], lora=lora, lora_copies=copies)


def lora_of(config: RunConfig) -> LoraSection | None:
    """The run's LoRA settings: ``model.lora``; for VL-SFT an absent key means LoRA with its defaults."""
    from honing.config.schema import LoraSection

    model = config.model
    if config.method == "vl_sft" and "lora" not in model.model_fields_set:
        return LoraSection()
    return model.lora


def targeted(name: str, target_modules: str | list[str]) -> bool:
    """peft's rule for whether the linear ``name`` gets an adapter (``all-linear``: all but the output head)."""
    import re

    if isinstance(target_modules, str):
        return target_modules.lower() == "all-linear" or re.fullmatch(target_modules, name) is not None
    return any(name == target or name.endswith(f".{target}") for target in target_modules)


@dataclass(frozen=True)
class BlockActivations:
    """What one block saves for backward: bytes per token, and bytes whatever the tokens (under autocast, the bf16
    copies of fp32 weights that its matmuls keep)."""

    per_token: float
    per_layer: float


def block_activation_bytes(
    model_config: PretrainedConfig,
    *,
    compute_dtype: torch.dtype,
    autocast: bool,
    weights_dtype: torch.dtype | None = None,
) -> BlockActivations:
    """What one block saves for backward: a 2-block minus a 1-block model's saved tensors (distinct storages,
    parameters left out) at ``MEASURE_TOKENS`` and twice as many tokens (the difference is per token, the rest per
    block), on fake tensors where the family allows. ``weights_dtype``: the weights' dtype in compute (FSDP2's bf16
    parameters under autocast); None: fp32 under autocast, else ``compute_dtype``."""
    options = dict(compute_dtype=compute_dtype, autocast=autocast, weights_dtype=weights_dtype)
    try:
        with quiet_fake_tensor_errors(), FakeTensorMode(allow_non_fake_inputs=True):
            return measured_block_bytes(model_config, **options)
    except Exception as error:  # noqa: BLE001
        # some forwards cannot run on fake tensors (a MoE's fp32 grouped matmul has a real CPU kernel and no fake
        # one; a forward may depend on values); the real run is the reference, and raises the model's own errors
        log.debug("plan: measuring the blocks on real tensors (fake tensors: %s)", error)
    return measured_block_bytes(model_config, **options)


@contextlib.contextmanager
def quiet_fake_tensor_errors() -> Iterator[None]:
    """Torch logs a traceback for an op it cannot run on fake tensors; here that only means measuring for real."""
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def measured_block_bytes(
    model_config: PretrainedConfig,
    *,
    compute_dtype: torch.dtype,
    autocast: bool,
    weights_dtype: torch.dtype | None = None,
) -> BlockActivations:
    """``block_activation_bytes`` on whatever tensors the ambient mode makes: real ones on the host, or fake."""
    if weights_dtype is None:
        weights_dtype = torch.float32 if autocast else compute_dtype
    one_block = {}
    for tokens in (MEASURE_TOKENS, 2 * MEASURE_TOKENS):
        saved = [saved_bytes(model_config, layers, tokens, weights_dtype, autocast) for layers in (1, 2)]
        one_block[tokens] = saved[1] - saved[0]
    per_token = (one_block[2 * MEASURE_TOKENS] - one_block[MEASURE_TOKENS]) / MEASURE_TOKENS
    return BlockActivations(per_token, max(one_block[MEASURE_TOKENS] - per_token * MEASURE_TOKENS, 0.0))


def saved_bytes(
    model_config: PretrainedConfig, layers: int, tokens: int, weights_dtype: torch.dtype, autocast: bool
) -> int:
    """The bytes a ``layers``-block decoder stack of ``model_config``'s family saves for backward over ``tokens``."""
    values = {**model_config.to_dict(), "num_hidden_layers": layers}
    if isinstance(values.get("layer_types"), list):  # one entry per layer (Qwen2 and later families)
        values["layer_types"] = values["layer_types"][:layers]
    # the embeddings are not part of a block (and special tokens past 8 would only draw transformers' warnings)
    values.update(vocab_size=8, pad_token_id=None, bos_token_id=None, eos_token_id=None)
    small = model_config.__class__.from_dict(values)
    torch.manual_seed(0)
    # the decoder stack alone (AutoModel: also a vision-language model's text config), no head
    model = AutoModel.from_config(small, dtype=weights_dtype)
    model.train()
    storages: dict[StorageWeakRef, int] = {}
    pack = storage_recorder({StorageWeakRef(p.untyped_storage()) for p in model.parameters()}, storages)
    ids = torch.zeros(1, tokens, dtype=torch.long)
    context = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with context, torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        hidden = model(input_ids=ids).last_hidden_state
    del hidden, model
    return sum(storages.values())


def storage_recorder(
    params: set[StorageWeakRef], storages: dict[StorageWeakRef, int]
) -> Callable[[torch.Tensor], torch.Tensor]:
    """A saved-tensor hook recording each distinct storage saved for backward (by identity, which fake tensors have
    too) that is no parameter's."""

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = StorageWeakRef(tensor.untyped_storage())
        if storage not in params:
            storages[storage] = tensor.untyped_storage().nbytes()
        # detached: a saved output that is the tensor itself refers back to its own grad_fn, a cycle in C++ that
        # Python's collector cannot see, and every measured model stayed alive (1.4 GiB a call at width 3,072)
        return tensor.detach()

    return pack


def runtime_bytes(device_type: str) -> int:
    """The host process's resident memory now (interpreter, torch, transformers), or the CUDA allowance."""
    if device_type == "cuda":
        return CUDA_RUNTIME_BYTES
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def plan_inputs(config: RunConfig, *, nproc: int = 1, vocab_size: int | None = None) -> tuple[PlanInputs, Any]:
    """The estimate's inputs for ``config`` run on ``nproc`` processes, and the model's transformers config."""
    model_config = model_config_of(config, vocab_size)
    model = meta_model(model_config)
    precision = config.trainer.precision
    param_bytes = 2 if precision == "bf16" or config.model.dtype == "bfloat16" else 4
    autocast = precision in ("bf16-mixed", "fp16-mixed", "fp8")  # fp16's activations weigh as bf16's
    compute_dtype = (
        torch.float16
        if precision == "fp16-mixed"
        else torch.bfloat16
        if param_bytes == 2 or autocast
        else torch.float32
    )
    dims = parallel_dims_from(config.parallel, nproc)
    rollouts = grpo_rollouts(config, nproc)  # GRPO's step on a rank, checked as at launch (None: other methods)
    local_rows = config.data.rows_per_step(dims.dp_size) // dims.dp_size
    micro = min(config.data.micro_batch_size or local_rows, local_rows)
    text_config = getattr(model_config, "text_config", model_config)
    device_type = planned_device_type(config)
    strategy = resolve_strategy(config.parallel.strategy, nproc)
    lora = lora_of(config)
    # the refusals the run itself would give (offload on CPU, params without FSDP2, tp not dividing the heads):
    # no plan for a run that won't start
    check_offload(
        config.parallel.offload, config.parallel.activation_offload, device=torch.device(device_type), strategy=strategy
    )
    check_model_layout(model, dims, lora=lora is not None, seq_len=config.data.seq_len)
    block = block_activation_bytes(
        text_config, compute_dtype=compute_dtype, autocast=autocast, weights_dtype=compute_weights_dtype(config, nproc)
    )
    compute_bytes = 2 if compute_dtype in (torch.bfloat16, torch.float16) else 4
    row_tokens = tokens_per_row(config, nproc)
    plan = PlanInputs(
        tensors=tensors_of(model, config),
        layers=text_config.num_hidden_layers,
        hidden=text_config.hidden_size,
        vocab=text_config.vocab_size,
        activation_bytes_per_token_layer=block.per_token,
        activation_bytes_per_layer=block.per_layer,
        tokens=(rollouts.forward if rollouts is not None else micro * rows_per_example(config)) * row_tokens,
        param_bytes=param_bytes,
        compute_bytes=compute_bytes,
        lora=lora is not None,
        quantize=config.model.quantize,
        state_dtype=config.optim.state_dtype,
        activation_checkpointing=config.parallel.activation_checkpointing,
        checkpointing_every=config.parallel.activation_checkpointing_every,
        chunked_loss=config.model.chunked_loss,
        chunk_bytes=CUDA_CHUNK_BYTES if device_type == "cuda" else CHUNK_BYTES,
        # FSDP2 shards every weight, gradient and state; tensor parallelism splits them again
        shards=dims.fsdp_size * dims.tp if nproc > 1 else 1,
        offload=config.parallel.offload,
        runtime_bytes=runtime_bytes(device_type),
        quantized_while_loading=config.model.name_or_path is not None,
        reference_copy=has_reference_copy(config, lora is not None),
        **rollout_inputs(config, text_config, rollouts, tp=dims.tp, compute_bytes=compute_bytes),
    )
    return plan, model_config


def planned_device_type(config: RunConfig) -> str:
    """``cuda`` or ``cpu``: the device the run will train on (``auto``: CUDA where this machine has it)."""
    device = config.trainer.device
    return "cuda" if device == "cuda" or (device == "auto" and torch.cuda.is_available()) else "cpu"


def compute_weights_dtype(config: RunConfig, nproc: int) -> torch.dtype | None:
    """The weights' dtype in the blocks' matmuls where it is bf16: bf16 weights (``model.dtype``, ``precision: bf16``)
    or FSDP2's bf16 copies of fp32 ones (mixed precision), which autocast then need not copy; None: the weights'."""
    precision = config.trainer.precision
    if precision == "bf16" or config.model.dtype == "bfloat16":
        return torch.bfloat16
    if resolve_strategy(config.parallel.strategy, nproc) != "fsdp":
        return None
    device = torch.device(planned_device_type(config))
    policy = mixed_precision_policy(config.parallel.mixed_precision, precision=precision, device=device)
    return torch.bfloat16 if policy.param_dtype == torch.bfloat16 else None


def tokens_per_row(config: RunConfig, nproc: int) -> int:
    """One row's tokens on a rank: ``data.seq_len``, split over the context-parallel ranks."""
    return config.data.seq_len // parallel_dims_from(config.parallel, nproc).cp


def has_reference_copy(config: RunConfig, lora: bool) -> bool:
    """Whether the run keeps a frozen copy of the model: DPO's and KTO's ``reference: copy`` (and ``lazy`` without
    LoRA); GRPO's KL term without LoRA (LoRA's reference is the model with its adapters off)."""
    copied = ("copy", "lazy") if not lora else ("copy",)  # lazy under LoRA scores with the adapters off
    if config.method == "dpo":
        return (config.dpo.reference if config.dpo is not None else "copy") in copied
    if config.method == "kto":  # its rows as DPO's pairs: a completion and a mismatched one
        return (config.kto.reference if config.kto is not None else "copy") in copied
    return config.method == "grpo" and config.grpo is not None and config.grpo.beta != 0.0 and not lora


def grpo_rollouts(config: RunConfig, nproc: int) -> RankRollouts | None:
    """A GRPO step's sizes on one of ``nproc`` ranks, the run's own arithmetic (``honing.plan.rollout_batch``: whole
    groups per rank, or ``grpo.completions_per_rank``'s pairs) and its launch refusals; None for other methods."""
    if config.method != "grpo" or config.grpo is None:
        return None
    return rank_rollouts(config, config.grpo, parallel_dims_from(config.parallel, nproc))


def rollout_inputs(
    config: RunConfig, text_config: PretrainedConfig, rollouts: RankRollouts | None, *, tp: int, compute_bytes: int
) -> dict[str, int]:
    """GRPO's rollout sizes on one rank (``rollouts.sampled`` completions sampled at once); none for other methods."""
    if rollouts is None or config.grpo is None:
        return {}
    grpo = config.grpo
    heads = text_config.num_attention_heads
    kv_heads = getattr(text_config, "num_key_value_heads", None) or heads
    head_dim = getattr(text_config, "head_dim", None) or text_config.hidden_size // heads
    return {
        "generation_rows": rollouts.sampled,
        "prompt_tokens": max(config.data.seq_len - grpo.max_completion_length, 0),  # the longest prompt kept
        "generated_tokens": grpo.max_completion_length,
        "kv_bytes_per_token_layer": 2 * max(kv_heads // tp, 1) * head_dim * compute_bytes,
    }


def rows_per_example(config: RunConfig) -> int:
    """Sequences per row of the micro-batch: DPO runs the chosen and the rejected completion, GRPO every one of a
    prompt's ``num_generations`` completions (one: a completion, where ``grpo.completions_per_rank`` counts the
    batch in completions)."""
    if config.method == "grpo":
        if config.grpo is not None and config.grpo.completions_per_rank is not None:
            return 1
        return config.grpo.num_generations if config.grpo is not None else 8
    return 2 if config.method in ("dpo", "orpo", "cpo", "kto") else 1


def describe(config: RunConfig, plan: PlanInputs, result: MemoryEstimate, budget: int | None, *, nproc: int = 1) -> str:
    """The plan as printed by ``honing plan``: the parts, the peak and the largest micro-batch for ``budget``."""
    total = sum(plan.tensors.quantizable + plan.tensors.other)
    trainable = sum(plan.tensors.lora + plan.tensors.lora_copies) if plan.lora else total
    quantized = f", {count(sum(plan.tensors.quantizable))} in {plan.quantize}" if plan.quantize else ""
    lines = [
        f"memory plan ({config.method}, {count(total)} parameters{quantized}, {count(trainable)} trainable, "
        f"precision {config.trainer.precision}, optimizer states {plan.state_dtype or 'in the weights dtype'}, "
        f"{plan.tokens:,} tokens per micro-batch, {plan.shards} shard(s), offload {plan.offload}):"
    ]
    rollouts = grpo_rollouts(config, nproc)
    if rollouts is not None:
        lines.append(
            f"  rollouts: {rollouts.rank_prompts} of the step's {rollouts.step_prompts} prompt(s) on each rank, "
            f"{rollouts.sampled} completions sampled at once per rank, {rollouts.forward} per forward and backward"
        )
    for name, value in result.parts().items():
        lines.append(f"  {name:<20} {format_bytes(value):>11}")
    if result.offloaded:
        lines.append(f"  {'on the host (offload)':<20} {format_bytes(result.offloaded):>11}")
    lines.append(f"  {'peak per rank':<20} {format_bytes(result.peak):>11}")
    if plan.quantize:
        how = "each weight quantized as it is read" if plan.quantized_while_loading else "before it is quantized"
        lines.append(f"  {'model build':<20} {format_bytes(result.build):>11}  ({how})")
    if budget is not None:
        row_tokens = tokens_per_row(config, nproc)
        rows = largest_micro_batch(
            replace(plan, tokens=row_tokens), budget, seq_len=row_tokens, rows_per_example=rows_per_example(config)
        )
        lines.append(f"largest micro-batch within {format_bytes(budget)}: {fitting_rows(config, plan, rows, budget)}")
    return "\n".join(lines)


def fitting_rows(config: RunConfig, plan: PlanInputs, rows: int, budget: int) -> str:
    """``describe``'s words for the largest micro-batch: rows (GRPO: prompts, each with its completions), or why none
    fits."""
    if config.method == "grpo":
        completions = rows_per_example(config)
        in_completions = config.grpo is not None and config.grpo.completions_per_rank is not None
        if rows and in_completions:  # the forward's width is grpo.micro_batch_completions
            return f"{rows} completion(s) of at most {config.data.seq_len} tokens (grpo.micro_batch_completions)"
        if rows:
            return f"{rows} prompt(s) of {completions} completions of at most {config.data.seq_len} tokens"
        rollouts = estimate(replace(plan, tokens=0))
        if rollouts.peak > budget:  # the rollouts alone do not fit, whatever the micro-batch
            batch = "grpo.completions_per_rank" if in_completions else "data.global_batch_size"
            return (
                f"none: the rollouts ({plan.generation_rows} completions sampled at once on a rank) need "
                f"{format_bytes(rollouts.peak)}; lower {batch} or grpo.max_completion_length"
            )
    return f"{rows} row(s) of {config.data.seq_len} tokens" if rows else "none: even one row does not fit"


def count(value: int) -> str:
    """``1.10B`` / ``12.6M`` / ``4,096``."""
    if value >= 1e9:
        return f"{value / 1e9:.2f}B"
    return f"{value / 1e6:.1f}M" if value >= 1e6 else f"{value:,}"


def plan_config(
    config: RunConfig, *, budget: int | None = None, nproc: int = 1, vocab_size: int | None = None
) -> tuple[str, MemoryEstimate]:
    """``honing plan``'s report and the estimate for ``config``; ``vocab_size``: the run's tokenizer's, for a
    ``model.config`` that does not name one (``honing.cli_plan`` builds the tokenizer)."""
    plan, _ = plan_inputs(config, nproc=nproc, vocab_size=vocab_size)
    if plan.activation_checkpointing == AUTO:  # what the run would choose: on a GPU budget, the least that fits
        if budget is not None and planned_device_type(config) == "cuda":
            mode, every, _ = checkpointing_for_budget(plan, budget)
        else:
            mode, every = "none", plan.checkpointing_every
        plan = replace(plan, activation_checkpointing=mode, checkpointing_every=every)
    result = estimate(plan)
    return describe(config, plan, result, budget, nproc=nproc), result
