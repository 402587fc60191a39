"""Export to Hugging Face format: a model as a folder that ``from_pretrained`` loads (LoRA merged in),
and a LoRA adapter alone as a peft folder."""

from __future__ import annotations

import copy
import os
import shutil
from typing import Any

import torch

from honing.models.param_names import parameter_name
from honing.models.quantize import dequantize_state_dict, dequantized_copy, is_quantized
from honing.models.wrappers import is_lora, unwrap_model


def export_hf(model: torch.nn.Module, tokenizer: Any, out_dir: str, *, state_dict: dict[str, Any] | None = None) -> str:
    """Save safetensors weights, config, generation config and tokenizer to ``out_dir``.

    Written to a temporary sibling first and swapped in, so an interrupted export never leaves
    a half-written folder where a good one was. A LoRA (peft) model is exported merged, so the
    folder is always a full model.
    """
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a progress bar for one small shard is noise in the run's log
    model = unwrap_model(model)
    if state_dict is not None:  # a quantized (QLoRA) base is exported de-quantized, in its compute dtype
        state_dict = dequantize_state_dict(state_dict)
    if is_lora(model) and state_dict is not None:  # gathered FSDP weights: merge them, save with the base's config
        state_dict = merged_state_dict(model, state_dict)
        model = model.get_base_model()
    else:
        model = merged_model(model)
    tmp = f"{out_dir.rstrip('/')}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, state_dict=state_dict, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    return swap_into_place(tmp, out_dir)


def save_adapter(model: torch.nn.Module, out_dir: str, *, state_dict: dict[str, torch.Tensor] | None = None) -> str:
    """Write the peft adapter folder (``adapter_config.json``, ``adapter_model.safetensors``) to ``out_dir``;
    under FSDP pass the gathered full ``state_dict`` of the peft model (as for ``export_hf``)."""
    model = unwrap_model(model)
    if not is_lora(model):
        raise ValueError(f"save_adapter: {type(model).__name__} has no LoRA adapter (not a peft model)")
    tmp = f"{out_dir.rstrip('/')}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    # "auto" would look the base model up (on the Hub, for a hub name) to see whether its vocabulary was
    # resized; honing never resizes embeddings, and trained embeddings are saved as modules_to_save.
    model.save_pretrained(tmp, safe_serialization=True, save_embedding_layers=False, state_dict=state_dict)
    return swap_into_place(tmp, out_dir)


def merged_model(model: torch.nn.Module) -> torch.nn.Module:
    """A transformers model with the LoRA adapters folded into its weights (a copy: ``model`` stays
    trainable); a model without adapters is returned as it is (unwrapped)."""
    model = unwrap_model(model)
    quantized = any(is_quantized(param) for param in model.parameters())
    if not is_lora(model):
        return dequantized_copy(model) if quantized else model
    if quantized:
        # QLoRA: the adapters fold into the de-quantized weights in full precision, as users expect of an export
        # (peft's own merge would re-quantize, or refuse for torchao's int8 layers)
        merged = merged_state_dict(model, dequantize_state_dict(model.state_dict()))
        base = dequantized_copy(model).unload()
        base.load_state_dict(merged)
        return base
    # merge_and_unload rewrites the wrapped model in place; unmerging later would not restore the
    # weights bit for bit, so the training model is never merged itself.
    return copy.deepcopy(model).merge_and_unload()


def merged_state_dict(model: torch.nn.Module, state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The merged model's weights, keyed as in the base model, from a full state dict of the peft ``model``
    (e.g. gathered from FSDP shards, where the sharded model itself cannot be copied and merged)."""
    from peft.tuners.lora import Linear as LoraLinear
    from peft.tuners.lora import LoraLayer

    model = unwrap_model(model)
    adapter = model.active_adapter
    merged = dict(state_dict)
    for name, module in model.named_modules():
        if not isinstance(module, LoraLayer):
            continue
        if not isinstance(module, LoraLinear) or module.use_dora.get(adapter):
            raise ValueError(
                f"merged_state_dict: {name}: only plain LoRA on Linear layers can be merged from a "
                f"state dict, not {type(module).__name__}"
            )
        lora_a = merged.pop(f"{name}.lora_A.{adapter}.weight").float()
        lora_b = merged.pop(f"{name}.lora_B.{adapter}.weight").float()
        delta = (lora_b @ lora_a) * module.scaling[adapter]  # as peft's get_delta_weight, in fp32
        base = merged.pop(f"{name}.base_layer.weight")
        merged[f"{name}.weight"] = (base.float() + (delta.T if module.fan_in_fan_out else delta)).to(base.dtype)
        if f"{name}.base_layer.bias" in merged:
            merged[f"{name}.bias"] = merged.pop(f"{name}.base_layer.bias")
    out = {}
    for key, value in merged.items():
        if ".original_module." in key:  # the frozen original of a module trained as a whole copy
            continue
        key = parameter_name(key.replace(f".modules_to_save.{adapter}.", "."))
        if "lora_" in key:
            raise ValueError(f"merged_state_dict: {key} is LoRA state this merge does not know how to fold in")
        out[key] = value
    return out


def swap_into_place(tmp: str, out_dir: str) -> str:
    """Replace ``out_dir`` (if any) with the finished folder ``tmp``; the old one goes only once the new is in."""
    old = f"{out_dir.rstrip('/')}.old"
    if os.path.exists(out_dir):
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out_dir, old)
    os.replace(tmp, out_dir)
    shutil.rmtree(old, ignore_errors=True)
    return out_dir
