"""``model.quantize`` for a pretrained base: each decoder linear weight quantized as transformers reads it from the
checkpoint, on the device it is loaded to, so the model is never allocated in full precision (a 70B base needs
~37 GiB of NF4 rather than 140 GB of bf16 first). transformers memory-maps the checkpoint while it reads it: those
pages are page cache, counted in the resident set until loading ends (``quantize_model`` then copies the weights left
in full precision out of the map, so it is released).

The loading is transformers' own (its torchao quantizer, ``TorchAoConfig``) with honing's quantization as torchao's
config (``quantized_base_config``): the same NF4 blocks (fitted to the FSDP2 shards) or int8 rows that
``quantize_model`` makes from a built model, so both paths give identical weights.
"""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import nn

from honing.hub import hub_load_error
from honing.models.quantize import check_quantize_kind, quantized_linears


def quantizing_load_options(
    kind: str | None,
    *,
    name_or_path: str,
    auto_class: Any,
    trust_remote_code: bool,
    device: torch.device,
    shards: int,
) -> dict[str, Any]:
    """Keyword arguments for ``load_pretrained_model`` that quantize the decoder's linears while loading onto
    ``device`` (``auto_class``: the model's transformers Auto class, None for a causal LM); none without ``kind``."""
    if kind is None:
        return {}
    check_quantize_kind(kind, shards)  # a one-line error without torchao, before it is imported
    from transformers import AutoConfig, AutoModelForCausalLM, TorchAoConfig

    from honing.models.quantized_base_config import QuantizedBaseConfig

    try:
        config = AutoConfig.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as error:  # not reachable, no such repository, not a model folder: say which
        raise hub_load_error("model.name_or_path", name_or_path, error) from None
    with torch.device("meta"):  # the module names only: no memory
        model = (auto_class or AutoModelForCausalLM).from_config(config, trust_remote_code=trust_remote_code)
    quantized = {id(module) for _, module in quantized_linears(model)}
    # the head, a vision tower and its projector keep their dtype, exactly as quantize_model leaves them
    keep = [
        re.escape(name)
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and id(module) not in quantized
    ]
    quantization = TorchAoConfig(quant_type=QuantizedBaseConfig(kind, shards), modules_to_not_convert=keep)
    return {"quantization_config": quantization, "device_map": {"": str(device)}}
