"""torchao's config for honing's quantized base weights (``model.quantize``), registered with torchao's
``quantize_``: what transformers' torchao quantizer applies to each linear as it reads a checkpoint. Imported only by
runs that quantize (torchao is an extra)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn
from torchao.core.config import AOBaseConfig
from torchao.quantization.transform_module import register_quantize_module_handler

from honing.models.quantize import weight_quantizer


@dataclass
class QuantizedBaseConfig(AOBaseConfig):
    """One of honing's quantized base weights: ``kind`` nf4, fp4 or int8, the 4-bit kinds' double-quantization
    blocks fitted to ``shards`` FSDP2 ranks (the blocks and scales ``quantize_model`` makes)."""

    kind: str = "nf4"
    shards: int = 1


@register_quantize_module_handler(QuantizedBaseConfig)
def quantize_linear(module: nn.Module, config: QuantizedBaseConfig, **_: object) -> nn.Module:
    """A linear layer with its weight quantized in place (kept as it is when 4-bit blocks do not fit it)."""
    weight = module.weight.detach()
    quantized = weight_quantizer(config.kind, config.shards)(weight)
    if quantized is not None:
        module.weight = nn.Parameter(quantized, requires_grad=False)
    return module
