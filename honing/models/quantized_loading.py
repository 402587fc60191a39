"""``model.quantize`` for a pretrained base: each decoder linear weight quantized as it is read from the checkpoint, on
the device it is loaded to, so the model is never allocated in full precision (a 70B base needs ~37 GiB of NF4 rather
than 140 GB of bf16 first).

Safetensors checkpoints are read one shard at a time by honing (``streamed_quantized_loading``): the host holds the
quantized model and the tensor being converted, and each shard's memory map is released before the next is opened.
Others (``.bin`` weights, or a model whose checkpoint tensors transformers joins or splits while loading, e.g. a
mixture of experts' stacked weights) load through transformers' own torchao quantizer with honing's quantization as
torchao's config (``quantized_base_config``). Both give the NF4 blocks (fitted to the FSDP2 shards) or int8 rows that
``quantize_model`` makes from a built model, so every path gives identical weights.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from honing.hub import hub_load_error
from honing.models.loading import ModelClass, load_pretrained_model
from honing.models.model_shape import pretrained_config
from honing.models.quantize import check_quantize_kind, check_skip_modules, own_unquantized_tensors, quantized_linears

if TYPE_CHECKING:
    from transformers import PretrainedConfig

log = logging.getLogger(__name__)


def load_quantized_pretrained(
    name_or_path: str,
    kind: str,
    *,
    attn_implementation: str | None,
    dtype: torch.dtype,
    trust_remote_code: bool,
    auto_class: ModelClass | None,
    device: torch.device,
    shards: int,
    shape: Mapping[str, Any] | None = None,
    skip_modules: Sequence[str] = (),
) -> nn.Module:
    """The model at ``name_or_path`` (``auto_class``: its transformers Auto class, None for a causal LM) on
    ``device`` in ``dtype``, its decoder's linear weights but ``skip_modules`` quantized to ``kind`` as they are read
    (NF4 blocks fitted to ``shards`` FSDP2 ranks); ``shape`` (``model.shape``) is checked against its config first."""
    from honing.models.streamed_quantized_loading import (
        checkpoint_shards,
        finish_loading,
        load_shards,
        renamings_for,
    )

    check_quantize_kind(kind, shards)  # a one-line error without torchao, before it is imported
    config = pretrained_config(name_or_path, shape=shape, trust_remote_code=trust_remote_code, use_shape_offline=False)
    try:
        files = checkpoint_shards(name_or_path)
    except OSError as error:  # e.g. an index naming a shard the folder lacks
        raise hub_load_error("model.name_or_path", name_or_path, error) from None
    model = meta_model(
        config, auto_class, attn_implementation=attn_implementation, dtype=dtype, trust_remote_code=trust_remote_code
    )
    check_skip_modules(model, skip_modules)
    renamings = renamings_for(model, files) if files else None
    if renamings is None:
        log.info(
            "model.quantize: %s is read and quantized by transformers' loader (its weights are .bin files, or "
            "tensors transformers joins while loading)",
            name_or_path,
        )
        options = quantizing_load_options(kind, model=model, device=device, shards=shards, skip_modules=skip_modules)
        model = load_pretrained_model(
            name_or_path,
            attn_implementation=attn_implementation,
            dtype=dtype,
            trust_remote_code=trust_remote_code,
            auto_class=auto_class,
            **options,
        )
        own_unquantized_tensors(model)
        return model
    loaded = load_shards(
        model, files, renamings, kind=kind, device=device, fsdp_shards=shards, skip_modules=skip_modules
    )
    finish_loading(model, loaded, device=device, name_or_path=name_or_path)
    return model


def meta_model(
    config: PretrainedConfig,
    auto_class: ModelClass | None,
    *,
    attn_implementation: str | None,
    dtype: torch.dtype,
    trust_remote_code: bool,
) -> nn.Module:
    """The model ``config`` describes, built on the meta device: its names, shapes and dtypes, no memory."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return (auto_class or AutoModelForCausalLM).from_config(
            config, attn_implementation=attn_implementation, dtype=dtype, trust_remote_code=trust_remote_code
        )


def quantizing_load_options(
    kind: str, *, model: nn.Module, device: torch.device, shards: int, skip_modules: Sequence[str] = ()
) -> dict[str, Any]:
    """Keyword arguments for ``load_pretrained_model`` that make transformers' loader quantize the decoder's linears
    of ``model`` (its meta-device skeleton), but for ``skip_modules``, while loading onto ``device``."""
    from transformers import TorchAoConfig

    from honing.models.quantized_base_config import QuantizedBaseConfig

    quantized = {id(module) for _, module in quantized_linears(model, skip_modules)}
    # the head, a vision tower and its projector keep their dtype, exactly as quantize_model leaves them
    keep = [
        re.escape(name)
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and id(module) not in quantized
    ]
    quantization = TorchAoConfig(quant_type=QuantizedBaseConfig(kind, shards), modules_to_not_convert=keep)
    return {"quantization_config": quantization, "device_map": {"": str(device)}}
