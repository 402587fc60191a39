"""QLoRA's quantized base: the language model's linear weights held as torchao NF4 (4-bit NormalFloat with double
quantization, as in the QLoRA paper), bitsandbytes' FP4 code on the same tensor, or int8 weight-only tensors, frozen,
under LoRA adapters in the compute dtype.

torchao rather than bitsandbytes: its tensors are plain torch subclasses that run on CPU and CUDA alike, dequantize
inside ``F.linear`` (so peft's LoRA layers wrap them unchanged), and NF4 implements FSDP2's all-gather hooks, so a
quantized base shards over ranks as a DTensor; bitsandbytes' ``Params4bit`` needs its own device backend and is
what LlamaFactory#4785 / peft#2505 report breaking under FSDP.
"""

from __future__ import annotations

import copy
import functools
import logging
import math
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from honing.errors import ConfigError

if TYPE_CHECKING:
    from honing.models.lora import LoraSettings

log = logging.getLogger(__name__)

KINDS = ("nf4", "fp4", "int8")
NF4_BLOCK = 64  # QLoRA's block: one absmax per 64 weights
NF4_SCALER_BLOCK = 256  # QLoRA's double quantization: the absmaxes themselves quantized to int8 in blocks of 256
# bitsandbytes' FP4 (a sign, 2 exponent bits, 1 mantissa bit, its own bias): the 8 magnitudes its kernels decode,
# over the largest, each with both signs (+0 and -0 are two codes there too). Held as the lookup table of torchao's
# NF4Tensor, whose blocks, double quantization, FSDP2 hooks and matmul do not depend on the table's values.
FP4_MAGNITUDES = (0.0, 0.0625, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0)
FP4_TABLE = tuple(sorted(-m / 12.0 for m in FP4_MAGNITUDES)) + tuple(m / 12.0 for m in FP4_MAGNITUDES)
SHARD_ALIGNMENT = 8  # second-level factors kept a multiple of this where possible (see nf4_scaler_block)
INSTALL_HINT = "pip install 'honing[quant]' (torchao)"


def require_torchao(key: str) -> None:
    """Raise a one-line ConfigError naming ``key`` when torchao is not installed."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torchao's import-time notices about optional kernels
            import torchao.optim  # noqa: F401
            import torchao.quantization  # noqa: F401
    except ImportError:
        raise ConfigError(f"{key}: needs torchao, which is not installed: {INSTALL_HINT}") from None


def is_quantized(tensor: torch.Tensor) -> bool:
    """True for a torchao NF4 or int8 weight tensor (also inside a DTensor shard)."""
    local = getattr(tensor, "_local_tensor", tensor)
    return type(local).__name__ in ("NF4Tensor", "Int8Tensor")


def dequantize(tensor: torch.Tensor) -> torch.Tensor:
    """A plain tensor of ``tensor``'s values in its compute dtype (``tensor`` itself when it is not quantized)."""
    if not is_quantized(tensor):
        return tensor
    if type(tensor).__name__ == "NF4Tensor":
        return tensor.get_original_weight()
    return tensor.dequantize()


def quantized_linears(model: nn.Module, skip_modules: Sequence[str] = ()) -> list[tuple[str, nn.Linear]]:
    """The linear layers to quantize: those of the language model's decoder (``get_decoder()``), so the output
    head, a vision tower and its projector keep their dtype (they are trained or configured on their own), less
    those ``skip_modules`` names (``model.quantize_skip_modules``)."""
    get_decoder = getattr(model, "get_decoder", None)
    decoder = get_decoder() if callable(get_decoder) else None
    if not isinstance(decoder, nn.Module):
        decoder = model
    prefix = next((name for name, module in model.named_modules() if module is decoder), "")
    linears = [
        (f"{prefix}.{name}" if prefix else name, module)
        for name, module in decoder.named_modules()
        if isinstance(module, nn.Linear)
    ]
    return [(name, module) for name, module in linears if not any(skips(entry, name) for entry in skip_modules)]


def skips(entry: str, name: str) -> bool:
    """Whether a ``model.quantize_skip_modules`` entry names the module ``name``: the module itself, its last dotted
    parts (``out_proj``, ``mamba.out_proj``), or a module above it (``model.layers.0``), as transformers'
    ``llm_int8_skip_modules`` matches at name boundaries."""
    return name == entry or name.endswith(f".{entry}") or name.startswith(f"{entry}.")


def check_skip_modules(model: nn.Module, skip_modules: Sequence[str]) -> None:
    """Refuse in one line a ``model.quantize_skip_modules`` entry that names no linear layer of the decoder."""
    names = [name for name, _ in quantized_linears(model)]
    for index, entry in enumerate(skip_modules):
        if not any(skips(entry, name) for name in names):
            leaves = list(dict.fromkeys(name.rsplit(".", 1)[-1] for name in names))
            raise ConfigError(
                f"model.quantize_skip_modules[{index}]: {entry!r} names no linear layer that model.quantize "
                f"quantizes; their names end in {', '.join(leaves[:8])}"
            )


def nf4_scaler_block(numel: int, rows: int, shards: int = 1) -> int | None:
    """The double-quantization block for an NF4 weight of ``numel`` values in ``rows`` rows: QLoRA's 256 absmaxes,
    or fewer for a small weight, so that FSDP2's ``shards`` row chunks each hold whole blocks of both levels.

    Blocks that leave a multiple of 8 second-level factors come first, so up to 8 shards quantize a weight the
    same way as one process does (the same values, so the same losses); None when no block size fits."""
    if numel % NF4_BLOCK or rows % shards:
        return None
    blocks = numel // NF4_BLOCK
    sizes = [NF4_SCALER_BLOCK >> shift for shift in range(NF4_SCALER_BLOCK.bit_length())]  # 256, 128, ..., 1
    for multiple in (math.lcm(shards, SHARD_ALIGNMENT), shards):
        for size in sizes:
            if blocks % size == 0 and (blocks // size) % multiple == 0:
                return size
    return None


def check_has_lora(kind: str | None, lora: LoraSettings | None) -> None:
    """Refuse ``model.quantize`` without LoRA adapters in one line: quantized weights cannot be trained."""
    if kind is not None and lora is None:
        raise ConfigError(
            f"model.quantize: {kind!r} needs model.lora (quantized weights cannot be trained, so full fine-tuning "
            "of a quantized model is not supported); set model.lora or model.quantize: null"
        )


def quantize_base(
    model: nn.Module,
    kind: str | None,
    lora: LoraSettings | None,
    *,
    device: torch.device,
    shards: int = 1,
    skip_modules: Sequence[str] = (),
) -> None:
    """``model.quantize`` for a run: refused without LoRA; else the decoder's linear weights quantized in place,
    each on the device before the rest of the model moves (see ``quantize_model``)."""
    check_has_lora(kind, lora)
    if kind is not None:
        quantize_model(model, kind, device=device, shards=shards, skip_modules=skip_modules)


def quantize_model(
    model: nn.Module, kind: str, *, device: torch.device, shards: int = 1, skip_modules: Sequence[str] = ()
) -> int:
    """Quantize the decoder's linear weights in place (frozen), each moved to ``device`` first, so the device never
    holds the whole model in full precision; ``shards``: the FSDP2 ranks each weight will be split over;
    ``skip_modules``: linears left in full precision. Weights already quantized while loading (``quantized_loading``)
    are kept. Returns how many weights are quantized."""
    check_quantize_kind(kind, shards)
    check_skip_modules(model, skip_modules)
    quantize = weight_quantizer(kind, shards)
    count, kept = 0, []
    for name, module in quantized_linears(model, skip_modules):
        if is_quantized(module.weight):
            count += 1
            continue
        weight = module.weight.detach().to(device)
        quantized = quantize(weight)
        if quantized is None:
            kept.append(name)
            continue
        module.weight = nn.Parameter(quantized, requires_grad=False)
        count += 1
        del weight
    forget_loading_quantizer(model)
    if kept:
        log.warning(
            "model.quantize: %d linear layer(s) kept in full precision (4-bit needs whole blocks of %d weights in "
            "each of %d shard(s)), e.g. %s",
            len(kept),
            NF4_BLOCK,
            shards,
            kept[0],
        )
    if count == 0:
        raise ConfigError(f"model.quantize: {kind!r}: the model has no linear layer that can be quantized")
    return count


def check_quantize_kind(kind: str, shards: int) -> None:
    """Refuse an unknown ``model.quantize`` and int8 weights under FSDP2 in one line; torchao must be installed."""
    if kind not in KINDS:
        raise ConfigError(f"model.quantize: expected one of {', '.join(KINDS)} or null, got {kind!r}")
    require_torchao("model.quantize")
    if kind == "int8" and shards > 1:
        raise ConfigError(
            f"model.quantize: 'int8' weights cannot be sharded by FSDP2 over {shards} ranks (torchao's int8 tensors "
            "have no all-gather); use nf4 or fp4, or parallel.strategy: ddp"
        )


def forget_loading_quantizer(model: nn.Module) -> None:
    """Drop transformers' record of the quantizer that loaded ``model``: the weights are held as ``quantize_model``
    holds them, and no saved ``config.json`` (a checkpoint's, the merged export's) may claim a quantized model."""
    for module in model.modules():
        if getattr(module, "hf_quantizer", None) is not None:
            module.hf_quantizer = None
        config = getattr(module, "config", None)
        if config is not None and "quantization_config" in vars(config):
            del config.quantization_config


def own_unquantized_tensors(model: nn.Module) -> None:
    """Copy the weights left in full precision (embeddings, head, norms) out of the checkpoint's memory map that
    transformers' loader left them in, so the map is released: every page of it that loading read would otherwise stay
    in the process's resident set."""
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:  # tied weights are one parameter, copied once
            if not is_quantized(tensor):
                tensor.data = tensor.data.clone()


def nf4_weight(weight: torch.Tensor, shards: int = 1) -> torch.Tensor | None:
    """``weight`` as torchao's NF4Tensor with double quantization, or None when its size is not whole blocks."""
    from torchao.quantization.quantize_.workflows.nf4.nf4_tensor import to_nf4

    scaler_block = nf4_scaler_block(weight.numel(), weight.shape[0], shards)
    if scaler_block is None:
        return None
    return to_nf4(weight, NF4_BLOCK, scaler_block)


def fp4_weight(weight: torch.Tensor, shards: int = 1) -> torch.Tensor | None:
    """``weight`` in bitsandbytes' FP4 code: NF4's blocks and double-quantized scales, each value the nearest of
    ``FP4_TABLE`` times its block's absmax; None when its size is not whole blocks."""
    from torchao.quantization.quantize_.workflows.nf4.nf4_tensor import NF4Tensor, SubclassTensorArgs

    scaler_block = nf4_scaler_block(weight.numel(), weight.shape[0], shards)
    if scaler_block is None:
        return None
    table = torch.tensor(FP4_TABLE, device=weight.device, dtype=weight.dtype)
    blocks = weight.numel() // NF4_BLOCK
    scalers, factor, mean = NF4Tensor.double_quantize_scalers(weight.flatten(), NF4_BLOCK, scaler_block)
    codes = NF4Tensor.convert_to_norm_float_weight(weight, blocks, NF4_BLOCK, table)
    meta = SubclassTensorArgs(
        weight.size(), weight.stride(), weight.storage_offset(), weight.dtype, weight.device, weight.requires_grad
    )
    return NF4Tensor(meta, NF4_BLOCK, blocks, scaler_block, scalers, factor, mean, codes, table)


def weight_quantizer(kind: str, shards: int = 1) -> Callable[[torch.Tensor], torch.Tensor | None]:
    """The function that quantizes one linear weight to ``kind`` (None back: its size does not fit the blocks)."""
    if kind == "int8":
        return int8_weight
    return functools.partial(fp4_weight if kind == "fp4" else nf4_weight, shards=shards)


def int8_weight(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` as torchao's int8 weight-only tensor (one scale per output row)."""
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    holder = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device=weight.device, dtype=weight.dtype)
    holder.weight = nn.Parameter(weight, requires_grad=False)
    quantize_(holder, Int8WeightOnlyConfig())
    return holder.weight.detach()


def dequantize_model(model: nn.Module) -> nn.Module:
    """``model`` with every quantized weight replaced, in place, by its de-quantized values (a plain tensor)."""
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            if is_quantized(param):
                setattr(module, name, nn.Parameter(dequantize(param.detach()), requires_grad=param.requires_grad))
    return model


def dequantized_copy(model: nn.Module) -> nn.Module:
    """A copy of ``model`` in full precision (``model`` stays quantized and trainable).

    The quantized weights enter the copy already de-quantized (through deepcopy's memo): torchao's NF4 ``clone``
    re-quantizes with its default blocks, which a small weight's double quantization does not divide."""
    memo: dict[int, Any] = {}
    for param in model.parameters():
        if is_quantized(param):
            memo[id(param)] = nn.Parameter(dequantize(param.detach()), requires_grad=param.requires_grad)
    return copy.deepcopy(model, memo)


def frozen_copy(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` that shares its quantized weights (frozen in both, so one copy of their memory;
    torchao's NF4 ``clone`` would also re-quantize with its default blocks)."""
    memo: dict[int, Any] = {id(param): param for param in model.parameters() if is_quantized(param)}
    return copy.deepcopy(model, memo)


def dequantize_state_dict(state_dict: dict[str, Any]) -> dict[str, Any]:
    """``state_dict`` with every quantized tensor de-quantized (e.g. full weights gathered from FSDP2 shards)."""
    return {key: dequantize(value) if is_quantized(value) else value for key, value in state_dict.items()}


def quantized_bytes(model: nn.Module) -> int:
    """Bytes held by the quantized weights of ``model`` (their packed codes and scales)."""
    total = 0
    for param in model.parameters():
        local = getattr(param, "_local_tensor", param)
        if is_quantized(local):
            total += sum(t.numel() * t.element_size() for t in plain_parts(local))
    return total


def plain_parts(tensor: torch.Tensor) -> list[torch.Tensor]:
    """The plain tensors ``tensor`` is made of: its codes and scales for a quantized weight, else itself."""
    if not is_quantized(tensor):
        return [tensor]
    names, _ = tensor.__tensor_flatten__()
    return [part for name in names for part in plain_parts(getattr(tensor, name))]
