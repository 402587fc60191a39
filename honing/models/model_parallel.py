"""Tensor and expert parallelism from the model family's own plans (transformers' ``base_model_tp_plan`` and
``base_model_ep_plan``), applied with DTensor over the run's mesh, and the layout checks made before any
process trains.

transformers 5 ships the parallel styles (``colwise``, ``rowwise``, ``embedding_rowwise``, ``packed_colwise``,
``grouped_gemm``, ``ep_dispatch_experts`` ...) and applies them to a model it did not load itself; honing
keeps its own mesh and FSDP2, and borrows only the plans and styles.
"""

from __future__ import annotations

import logging

from torch import nn

from honing.errors import ConfigError
from honing.models.moe import expert_count, text_config
from honing.models.wrappers import transformers_model
from honing.parallel_dims import ParallelDims, check_divides

log = logging.getLogger(__name__)


def check_model_layout(model: nn.Module, dims: ParallelDims, *, lora: bool = False, seq_len: int | None = None) -> None:
    """Refuse, in one line naming the keys, a layout this model cannot take: tp not dividing the attention
    heads or KV heads, a family without a tensor-parallel plan, ep on a dense model or not dividing the experts,
    cp not dividing the heads or rows (``honing.models.ulysses``), or cp on a MoE model."""
    from honing.models.ulysses import check_context_parallel

    config = text_config(transformers_model(model).config)
    family = getattr(config, "model_type", type(model).__name__)
    check_context_parallel(config, dims, seq_len)
    if dims.cp > 1 and expert_count(config) is not None:
        raise ConfigError(
            f"parallel.cp={dims.cp} with the MoE model {family!r}: its router's load-balancing loss would be "
            "computed on each rank's slice of the rows, not the rows; use parallel.cp=1 (and ep / dp_shard)"
        )
    if dims.tp > 1:
        if lora:
            raise ConfigError(
                f"parallel.tp={dims.tp} with model.lora: peft's adapters are not split by the tensor-parallel plan; "
                "train LoRA with data parallelism (dp_shard / dp_replicate) or drop model.lora"
            )
        if not plans(model, dims)[0]:
            raise ConfigError(
                f"parallel.tp={dims.tp}: the {family!r} family has no tensor-parallel plan in transformers "
                "(config.base_model_tp_plan); use dp_shard / dp_replicate instead"
            )
        check_divides("the model's num_attention_heads", config.num_attention_heads, "tp", dims.tp)
        kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        check_divides("the model's num_key_value_heads", kv_heads, "tp", dims.tp)
    if dims.ep > 1:
        experts = expert_count(config)
        if experts is None:
            raise ConfigError(f"parallel.ep={dims.ep}: the {family!r} model has no experts (not a MoE model)")
        check_divides("the number of experts", experts, "ep", dims.ep)
        if not plans(model, dims)[1]:
            raise ConfigError(
                f"parallel.ep={dims.ep}: the {family!r} family has no expert-parallel plan in transformers "
                "(config.base_model_ep_plan)"
            )
        if dims.tp > 1 or dims.cp > 1:
            raise ConfigError(
                f"parallel.ep={dims.ep} with tp={dims.tp}, cp={dims.cp}: expert parallelism composes with data "
                "parallelism (dp_shard / dp_replicate) only"
            )


def plans(model: nn.Module, dims: ParallelDims) -> tuple[dict[str, str], dict[str, str]]:
    """The model's tensor- and expert-parallel plans for this layout, one entry per module or parameter
    (``model.layers.3.mlp.up_proj``), names relative to the Hugging Face model; empty where the size is 1."""
    from transformers.distributed.configuration_utils import DistributedConfig

    hf_model = transformers_model(model)
    # transformers' dense mesh puts ep inside fsdp × tp; ours keeps ep beside dp_shard, the same ranks
    config = DistributedConfig(tp_size=dims.tp, ep_size=dims.ep, fsdp_size=dims.fsdp_size)
    # the plans' own resolution: the config's overrides, the layer wildcards expanded, EP rules first
    tp_plan, ep_plan, _ = hf_model._resolve_parallel_plans(config)
    return tp_plan, ep_plan


def apply_tensor_and_expert_parallel(model: nn.Module, dims: ParallelDims) -> None:
    """Split the weights of ``model`` (in place) by its family's plans over the ``tp`` and ``ep`` dimensions."""
    if dims.tp == 1 and dims.ep == 1:
        return
    from transformers.distributed.expert_parallel import apply_expert_parallelism
    from transformers.distributed.tensor_parallel import apply_tensor_parallelism

    hf_model = transformers_model(model)
    tp_plan, ep_plan = plans(model, dims)
    if dims.tp > 1:
        apply_tensor_parallelism(hf_model, dims.submesh("tp"), tp_plan)
    if dims.ep > 1:
        apply_expert_parallelism(
            hf_model, dims.submesh("ep"), dims.submesh("tp"), ep_plan, ep_implementation="all_to_all"
        )
    log.info("tensor / expert parallel plans applied: %s", dims.describe())


def expert_modules(model: nn.Module, dims: ParallelDims) -> list[nn.Module]:
    """The modules whose experts are sharded over ``ep`` (each gets its own FSDP2 unit on ``efsdp``)."""
    if dims.ep == 1:
        return []
    hf_model = transformers_model(model)
    _, ep_plan = plans(model, dims)
    return [hf_model.get_submodule(name) for name, style in ep_plan.items() if style == "ep_dispatch_experts"]
