"""Mixture-of-experts models as transformers builds them (qwen3_moe, olmoe, mixtral, ...): which models are, the
coefficient of their router's load-balancing loss, and how many tokens each expert receives.

The loss itself is transformers' own (``output_router_logits=True`` makes the forward return ``aux_loss``, the
Switch Transformer loss of ``load_balancing_loss_func``); honing only weights it into the step
(``honing.methods.lm``) and counts expert loads from the same router logits for the load-imbalance metric.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from honing.errors import ConfigError
from honing.models.wrappers import transformers_model

if TYPE_CHECKING:
    from transformers import PretrainedConfig

# where transformers' MoE configs keep their number of experts (qwen3_moe / olmoe, mixtral)
_EXPERT_COUNT_NAMES = ("num_experts", "num_local_experts")


def text_config(config: PretrainedConfig) -> PretrainedConfig:
    """The language model's part of a transformers config (itself for a text-only model)."""
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def expert_count(config: PretrainedConfig) -> int | None:
    """How many experts each MoE layer has (None for a dense model)."""
    config = text_config(config)
    for name in _EXPERT_COUNT_NAMES:
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 1:
            return value
    return None


def is_moe(config: PretrainedConfig) -> bool:
    """True for a mixture-of-experts model whose transformers forward returns the router's load-balancing loss
    (``output_router_logits``; models without one, e.g. deepseek_v3's bias-balanced router, are not)."""
    config = text_config(config)
    return (
        expert_count(config) is not None
        and bool(getattr(config, "num_experts_per_tok", None))
        and getattr(config, "router_aux_loss_coef", None) is not None
    )


def router_aux_loss_coef(config: PretrainedConfig, override: float | None = None) -> float | None:
    """The weight of the router's load-balancing loss: ``override`` (``model.router_aux_loss_coef``), else the
    model config's own ``router_aux_loss_coef``; None for a model that is not MoE (an override is then refused)."""
    if not is_moe(config):
        if override is not None:
            family = getattr(text_config(config), "model_type", type(config).__name__)
            raise ConfigError(
                f"model.router_aux_loss_coef: {override} was given, but the {family!r} model is not a "
                "mixture-of-experts model with a router load-balancing loss (e.g. qwen3_moe, olmoe, mixtral); "
                "remove the key"
            )
        return None
    return float(override if override is not None else text_config(config).router_aux_loss_coef)


def router_layers(model: nn.Module) -> list[int] | None:
    """The decoder-layer index of each router, in the order the forward returns their logits (a qwen3_moe's
    ``mlp_only_layers`` have none); None when the model does not say which modules are its routers."""
    hf_model = transformers_model(model)
    recorder = getattr(type(hf_model), "_can_record_outputs", None) or {}
    router = getattr(recorder.get("router_logits"), "target_class", None)
    if router is None:
        return None
    layers = []
    for name, module in hf_model.named_modules():
        if isinstance(module, router):
            index = re.search(r"\.(\d+)\.", f".{name}.")  # e.g. model.layers.3.mlp.gate: the layer's index
            layers.append(int(index.group(1)) if index else len(layers))
    return layers


def routed_tokens(inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """How many tokens of a (micro-)batch transformers' load-balancing loss averages over: the ones of its
    ``attention_mask`` (padding is not routed), else every position of its ``input_ids``."""
    mask = inputs.get("attention_mask")
    if mask is not None:
        return mask.sum()
    input_ids = inputs["input_ids"]
    return torch.full((), input_ids.numel(), dtype=torch.long, device=input_ids.device)  # no host-to-device copy


@torch.no_grad()
def expert_loads(
    router_logits: Sequence[torch.Tensor], top_k: int, token_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """``[routers, experts]``: how many of the tokens in ``token_mask`` (every token when None) each router sends
    to each expert, from the top ``top_k`` of its logits (``num_experts_per_tok``), as an exact integer count."""
    logits = torch.stack([layer.detach() for layer in router_logits])  # [routers, tokens, experts]
    routers, tokens, experts = logits.shape
    chosen = logits.topk(top_k, dim=-1).indices  # the softmax keeps the order: the logits' top-k is the router's
    if token_mask is None:
        weights = torch.ones_like(chosen)
    else:
        weights = token_mask.reshape(1, tokens, 1).to(chosen.dtype).expand_as(chosen)
    loads = torch.zeros(routers, experts, dtype=torch.long, device=logits.device)
    return loads.scatter_add_(1, chosen.reshape(routers, -1), weights.reshape(routers, -1))


def load_imbalance(loads: torch.Tensor) -> torch.Tensor:
    """Each router's busiest expert's load over the mean load (OLMo-core's ``load imbalance``): 1 when balanced,
    up to the number of experts / top-k when every token goes to the same experts; 0 without tokens."""
    loads = loads.double()
    return loads.amax(dim=-1) / loads.mean(dim=-1).clamp(min=torch.finfo(torch.float64).tiny)


def inactive_expert_params(model: nn.Module) -> int:
    """The routed experts' weights one token does not use, ``1 - top_k / experts`` of them (0 for a dense model):
    what a FLOP count leaves out. Experts are the parameters under a module named ``experts``, as in every
    transformers MoE family (a qwen2_moe's ``shared_expert`` is dense)."""
    hf_model = transformers_model(model)
    config = text_config(getattr(hf_model, "config", None))
    experts, top_k = expert_count(config), getattr(config, "num_experts_per_tok", None)
    if experts is None or not top_k:
        return 0
    # numel() of a DTensor is its full size: experts sharded over ranks count whole
    weights = sum(p.numel() for name, p in hf_model.named_parameters() if ".experts." in f".{name}")
    return weights - weights * top_k // experts
