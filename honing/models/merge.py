"""Merge LoRA adapters into their base model, and write adapters and merged checkpoints to disk.

``merge_checkpoint(CHECKPOINT_DIR, OUT_DIR)`` writes::

    OUT_DIR/                    the merged model: AutoModelForCausalLM.from_pretrained(OUT_DIR) loads it
        config.json, generation_config.json, model.safetensors, tokenizer files
        adapter/                the LoRA adapter alone: peft.PeftModel.from_pretrained(base, OUT_DIR/adapter)
            adapter_config.json, adapter_model.safetensors
"""

from __future__ import annotations

import copy
import logging
import os
import shutil

import torch

from honing.models.checkpoint_export import load_model_from_checkpoint
from honing.models.export import export_hf, swap_into_place, unwrap_model
from honing.models.lora import is_lora, parameter_name

log = logging.getLogger(__name__)

ADAPTER_DIR = "adapter"


def merged_model(model: torch.nn.Module) -> torch.nn.Module:
    """A transformers model with the LoRA adapters folded into its weights (a copy: ``model`` stays
    trainable); a model without adapters is returned as it is (unwrapped)."""
    model = unwrap_model(model)
    if not is_lora(model):
        return model
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
            raise ValueError(f"merged_state_dict: {name}: only plain LoRA on Linear layers can be merged from a "
                             f"state dict, not {type(module).__name__}")
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


def merge_checkpoint(checkpoint_dir: str, out_dir: str) -> str:
    """Write a checkpoint's merged model and tokenizer to ``out_dir`` and its adapter to ``out_dir/adapter``.

    Everything is written to a sibling folder and swapped in at the end, so ``out_dir`` never holds a
    merged model without its adapter.
    """
    model, tokenizer = load_model_from_checkpoint(checkpoint_dir)
    staging = f"{out_dir.rstrip('/')}.merging"
    export_hf(model, tokenizer, staging)
    if is_lora(model):
        save_adapter(model, os.path.join(staging, ADAPTER_DIR))
    else:
        log.warning("%s has no LoRA adapter (model.lora is not set in its config.yaml): wrote the full model to "
                    "%s without an adapter folder; `honing export` does the same", checkpoint_dir, out_dir)
    return swap_into_place(staging, out_dir)
