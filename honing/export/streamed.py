"""The weights of a trained model as a Hugging Face checkpoint, one layer at a time.

A layer's tensors are gathered (FSDP2 / tensor-parallel shards: every rank takes part), de-quantized (a QLoRA
base), merged with their LoRA deltas, renamed as transformers saves them, written and freed before the next layer
is touched. So an export never holds a second model: its extra memory is one layer's weights, in full precision.
The files' headers are laid out first by running the same steps on meta tensors (shapes, no data).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from honing.export.safetensors_writer import ShardedWriter, TensorSpec
from honing.models.param_names import parameter_name
from honing.models.quantize import dequantize
from honing.models.wrappers import is_lora, unwrap_model

# a tensor's layer: the name up to its first index (model.layers.3, model.visual.blocks.7); the rest, its module
LAYER = re.compile(r"^(.*?\.\d+)\.")
# module names that wrappers insert (activation checkpointing, torch.compile) and state dicts leave out
WRAPPER_NAMES = re.compile(r"(_checkpoint_wrapped_module|_orig_mod|_fsdp_wrapped_module)\.")
MERGE_BLOCK = 1 << 22  # values of a merged weight computed at once (16 MiB of fp32)
MAX_SHARD_BYTES = 5 * 2**30  # the hub's customary shard size; memory does not depend on it (tensors stream)


class StreamedExport:
    """The merged, de-quantized weights of ``model`` (a transformers or peft model, possibly sharded), in groups."""

    def __init__(self, model: nn.Module):
        self.model = unwrap_model(model)
        self.lora = is_lora(self.model)
        #: the transformers model: its config, its tied weights and its checkpoint conversions name the files' keys
        self.base = self.model.get_base_model() if self.lora else self.model
        self.state = self.model.state_dict(keep_vars=True)  # the live tensors (DTensors under FSDP2): no copies
        self.lora_layers = lora_layers(self.model) if self.lora else {}
        self.skipped = tied_copies(self.state, self.base)
        self.converts = fuses_or_splits(self.base)
        #: a LoRA layer's state-dict keys (base weight and bias, adapters) to the layer's name: merged together
        self.lora_owner = {
            f"{name}.{part}": name
            for name in self.lora_layers
            for part in (
                "base_layer.weight",
                "base_layer.bias",
                f"lora_A.{self.active_adapter}.weight",
                f"lora_B.{self.active_adapter}.weight",
            )
        }

    def groups(self) -> list[list[str]]:
        """The state-dict keys in order, grouped by layer (a LoRA layer's base weight with its adapters)."""
        grouped: dict[str, list[str]] = {}
        for key in self.state:
            if key in self.skipped:
                continue
            name = parameter_name(key)
            match = LAYER.match(name)
            grouped.setdefault(match.group(1) if match else name.rsplit(".", 1)[0], []).append(key)
        return list(grouped.values())

    def units(self, keys: list[str]) -> list[list[str]]:
        """A group's keys in the pieces that are folded and written together: one tensor, or one LoRA layer's base
        weight with its adapters; the whole group when the model's checkpoint format fuses or splits tensors (a
        mixture of experts' stacked weights), which takes the group's tensors together."""
        if self.converts:
            return [keys]
        units: dict[str, list[str]] = {}
        for key in keys:
            units.setdefault(self.lora_owner.get(key, key), []).append(key)
        return list(units.values())

    def specs(self) -> list[TensorSpec]:
        """Every tensor the export writes, in order: the same steps as ``tensors`` on meta tensors."""
        return [
            TensorSpec(name, tensor.dtype, tuple(tensor.shape))
            for keys in self.groups()
            for unit in self.units(keys)
            for name, tensor in self.fold({key: meta_like(self.state[key]) for key in unit}).items()
        ]

    def tensors(self, on_gathered: Callable[[], bool] = lambda: True) -> Iterator[tuple[str, torch.Tensor]]:
        """``(name, tensor)`` as the checkpoint holds them, layer by layer. Every rank of a sharded model must
        iterate (the gathers are collectives); ``on_gathered()`` False skips the folding on this rank."""
        for keys in self.groups():
            gathered = {key: full_tensor(self.state[key]) for key in keys}
            if not on_gathered():
                continue
            for unit in self.units(keys):
                yield from self.fold({key: dequantize(gathered[key]) for key in unit}).items()
            del gathered

    def fold(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One group's tensors (keyed as in the state dict) as the checkpoint names them: LoRA merged, peft's names
        undone, transformers' load-time conversions reversed."""
        ignored = set(self.base._keys_to_ignore_on_save or ())
        merged = {name: value for name, value in self.merged(tensors).items() if name not in ignored}
        return reverted_names(self.base, merged)

    def merged(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``tensors`` (keyed as in the state dict) with the LoRA deltas merged, keyed as in the base model."""
        adapter = self.active_adapter
        out = {}
        for key, value in merge_lora_deltas(self.lora_layers, dict(tensors), adapter=adapter).items():
            if ".original_module." in key:  # the frozen original of a module trained as a whole copy
                continue
            name = parameter_name(key.replace(f".modules_to_save.{adapter}.", "."))
            if "lora_" in name:
                raise ValueError(f"export: {name} is LoRA state this merge does not know how to fold in")
            out[name] = value
        return out

    @property
    def active_adapter(self) -> str:
        """The peft adapter being exported (``default`` for honing's runs)."""
        return self.model.active_adapter if self.lora else "default"

    def write(self, folder: str, *, write: bool = True, max_shard_bytes: int = MAX_SHARD_BYTES) -> None:
        """The weights into ``folder`` as safetensors shards (and their index); with ``write`` False this rank
        only takes part in the gathers."""
        writer = ShardedWriter(folder, self.specs(), max_shard_bytes=max_shard_bytes) if write else None
        for name, tensor in self.tensors(on_gathered=lambda: write):
            writer.write(name, tensor)
        if writer is not None:
            writer.close()


def lora_layers(model: nn.Module) -> dict[str, Any]:
    """The peft LoRA layers of ``model`` by their state-dict prefix (without the wrappers' own module names, which
    the state dict leaves out too)."""
    from peft.tuners.lora import LoraLayer

    return {
        WRAPPER_NAMES.sub("", name): module for name, module in model.named_modules() if isinstance(module, LoraLayer)
    }


def merge_lora_deltas(layers: dict[str, Any], tensors: dict[str, torch.Tensor], *, adapter: str) -> dict[str, Any]:
    """``tensors`` with each LoRA layer's ``base_layer`` weight replaced by the merged weight (as peft's
    ``get_delta_weight``, in fp32) and its adapter tensors removed; layers not in ``tensors`` are left alone."""
    if not layers:  # a full model: importing peft would import bitsandbytes, which warns on some CPUs
        return tensors
    from peft.tuners.lora import Linear as LoraLinear

    for name, module in layers.items():
        base_key = f"{name}.base_layer.weight"
        if base_key not in tensors:
            continue
        if not isinstance(module, LoraLinear) or module.use_dora.get(adapter):
            raise ValueError(
                f"export: {name}: only plain LoRA on Linear layers can be merged from a state dict, not "
                f"{type(module).__name__}"
            )
        lora_a = tensors.pop(f"{name}.lora_A.{adapter}.weight")
        lora_b = tensors.pop(f"{name}.lora_B.{adapter}.weight")
        base = tensors.pop(base_key)
        tensors[f"{name}.weight"] = merged_weight(base, lora_a, lora_b, module.scaling[adapter], module.fan_in_fan_out)
        if f"{name}.base_layer.bias" in tensors:
            tensors[f"{name}.bias"] = tensors.pop(f"{name}.base_layer.bias")
    return tensors


def merged_weight(
    base: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor, scaling: float, fan_in_fan_out: bool
) -> torch.Tensor:
    """``base + scaling * B @ A`` (transposed for ``fan_in_fan_out``) in ``base``'s dtype, computed in fp32 as peft's
    ``get_delta_weight``, a block of rows at a time: the fp32 temporaries stay a few MiB, whatever the layer's size."""
    if base.device.type == "meta":
        return torch.empty_like(base)
    out = torch.empty_like(base)
    rows = max(1, MERGE_BLOCK // max(1, base.shape[1]))
    lora_a, lora_b = lora_a.float(), lora_b.float()
    for start in range(0, base.shape[0], rows):
        end = min(start + rows, base.shape[0])
        # fan_in_fan_out: the weight is delta's transpose, so its rows are columns of A
        delta = (lora_b @ lora_a[:, start:end]).T if fan_in_fan_out else lora_b[start:end] @ lora_a
        out[start:end] = (base[start:end].float() + delta * scaling).to(base.dtype)
    return out


def reverted_names(model: nn.Module, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``tensors`` named and shaped as the model's checkpoints are (transformers reverses the renames and fusions
    its loading applies, e.g. a mixture of experts' stacked weights), as ``save_pretrained`` does."""
    from transformers.core_model_loading import revert_weight_conversion

    return revert_weight_conversion(model, tensors)


def fuses_or_splits(model: nn.Module) -> bool:
    """Whether transformers' checkpoint format for ``model`` joins or splits tensors (beyond renaming keys), as
    ``revert_weight_conversion`` reads it."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightConverter

    conversions = getattr(model, "_weight_conversions", None)
    if conversions is None:
        conversions = get_model_conversion_mapping(model, add_legacy=False)
    return any(isinstance(conversion, WeightConverter) for conversion in conversions or ())


def tied_copies(state: dict[str, Any], model: nn.Module) -> set[str]:
    """The state-dict keys that are another key's tensor (a tied output head): the checkpoint keeps the one
    transformers does, the key its model does not declare as tied."""
    from transformers.modeling_utils import _get_tied_weight_keys

    tied_patterns = _get_tied_weight_keys(model)
    by_tensor: dict[int, list[str]] = {}
    for key, value in state.items():
        by_tensor.setdefault(id(value), []).append(key)
    skipped = set()
    for keys in by_tensor.values():
        if len(keys) < 2:
            continue
        declared = [key for key in keys if any(re.search(pattern, parameter_name(key)) for pattern in tied_patterns)]
        kept = next((key for key in keys if key not in declared), keys[0])
        skipped.update(key for key in keys if key != kept)
    return skipped


def full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a DTensor (all its ranks take part), else the tensor itself."""
    tensor = tensor.detach()
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def meta_like(tensor: torch.Tensor) -> torch.Tensor:
    """A meta tensor of ``tensor``'s full shape and dtype: a quantized weight (torchao's NF4 / int8) reports its
    compute dtype, the one ``dequantize`` gives, so the header matches what is written."""
    return torch.empty(tuple(tensor.shape), dtype=tensor.dtype, device="meta")
