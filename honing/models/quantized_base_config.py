"""torchao's config for honing's quantized base weights (``model.quantize``), registered with torchao's
``quantize_``: what transformers' torchao quantizer applies to each linear as it reads a checkpoint. Imported only by
runs that quantize (torchao is an extra)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn
from torchao.core.config import AOBaseConfig
from torchao.quantization.transform_module import register_quantize_module_handler

from honing.models.quantize import int8_weight, nf4_weight


@dataclass
class QuantizedBaseConfig(AOBaseConfig):
    """One of honing's quantized base weights: ``kind`` nf4 or int8, NF4's double-quantization blocks fitted to
    ``shards`` FSDP2 ranks (the blocks and scales ``quantize_model`` makes)."""

    kind: str = "nf4"
    shards: int = 1


@register_quantize_module_handler(QuantizedBaseConfig)
def quantize_linear(module: nn.Module, config: QuantizedBaseConfig, **_: object) -> nn.Module:
    """A linear layer with its weight quantized in place (kept as it is when NF4's blocks do not fit it)."""
    weight = module.weight.detach()
    quantized = nf4_weight(weight, config.shards) if config.kind == "nf4" else int8_weight(weight)
    if quantized is not None:
        module.weight = nn.Parameter(quantized, requires_grad=False)
    return module
