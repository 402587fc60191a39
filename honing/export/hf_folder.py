"""Export to Hugging Face format: a model as a folder that ``from_pretrained`` loads (LoRA merged in),
and a LoRA adapter alone as a peft folder."""

from __future__ import annotations

import copy
import os
import shutil
from typing import TYPE_CHECKING

import torch
from torch.distributed.tensor import DTensor

from honing.errors import CheckpointError
from honing.export.streamed import StreamedExport, full_tensor
from honing.models.quantize import dequantize_state_dict, dequantized_copy, is_quantized
from honing.models.wrappers import is_lora, unwrap_model

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase, ProcessorMixin


def export_hf(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase | ProcessorMixin | None,
    out_dir: str,
    *,
    write: bool = True,
) -> str:
    """Save safetensors weights, config, generation config and tokenizer to ``out_dir``.

    The weights stream layer by layer (``StreamedExport``): a LoRA model is written merged and a quantized base
    de-quantized, without a second copy of the model. A sharded (FSDP2 / tensor-parallel) model is gathered one
    layer at a time: every rank calls this, and only ranks with ``write`` (rank 0) write. Written to a temporary
    sibling first and swapped in, so an interrupted export never leaves a half-written folder where a good one was.
    """
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a progress bar for one small shard is noise in the run's log
    export = StreamedExport(model)
    tmp = f"{out_dir.rstrip('/')}.tmp"
    if write:
        shutil.rmtree(tmp, ignore_errors=True)
        write_model_files(export.base, tmp)
    export.write(tmp, write=write)
    if not write:
        return out_dir
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    return swap_into_place(tmp, out_dir)


def write_model_files(model: torch.nn.Module, folder: str) -> None:
    """Everything ``save_pretrained`` writes but the weights: config (with its dtype and architecture), generation
    config, a remote-code model's own modules."""
    model.save_pretrained(folder, state_dict={}, safe_serialization=True)
    for name in os.listdir(folder):  # the empty weights file that an empty state dict gives
        if name.startswith("model") and name.endswith((".safetensors", ".safetensors.index.json")):
            os.remove(os.path.join(folder, name))


def save_adapter(model: torch.nn.Module, out_dir: str, *, write: bool = True) -> str:
    """Write the peft adapter folder (``adapter_config.json``, ``adapter_model.safetensors``) to ``out_dir``.
    A sharded model gathers its adapter weights alone (every rank calls this; ranks with ``write`` write)."""
    model = unwrap_model(model)
    if not is_lora(model):
        raise ValueError(f"save_adapter: {type(model).__name__} has no LoRA adapter (not a peft model)")
    state_dict = adapter_state_dict(model)
    if not write:
        return out_dir
    tmp = f"{out_dir.rstrip('/')}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    # "auto" would look the base model up (on the Hub, for a hub name) to see whether its vocabulary was
    # resized; honing never resizes embeddings, and trained embeddings are saved as modules_to_save.
    model.save_pretrained(tmp, safe_serialization=True, save_embedding_layers=False, state_dict=state_dict)
    return swap_into_place(tmp, out_dir)


def adapter_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor] | None:
    """The adapter's own tensors (LoRA weights, ``modules_to_save`` copies), gathered whole when the model is
    sharded; None (peft reads the model) when it is not."""
    state = model.state_dict(keep_vars=True)
    if not any(isinstance(value, DTensor) for value in state.values()):
        return None
    adapter = [key for key in state if "lora_" in key or ".modules_to_save." in key]
    return {key: full_tensor(state[key]) for key in adapter}


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
    """The merged model's weights, keyed as in the base model, from a full state dict of the peft ``model``."""
    return StreamedExport(model).merged(state_dict)


def swap_into_place(tmp: str, out_dir: str) -> str:
    """Replace ``out_dir`` (if any) with the finished folder ``tmp``; the old one goes only once the new is in."""
    check_replaceable(out_dir)
    old = f"{out_dir.rstrip('/')}.old"
    if os.path.exists(out_dir):
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out_dir, old)
    os.replace(tmp, out_dir)
    shutil.rmtree(old, ignore_errors=True)
    return out_dir


#: what an earlier export holds: a model folder, or a peft adapter folder
EXPORT_MARKERS = ("config.json", "adapter_config.json")


def check_replaceable(out_dir: str) -> None:
    """Refuse to replace ``out_dir`` unless it is absent, empty or an earlier export: the swap removes what it held."""
    if not os.path.exists(out_dir):
        return
    if not os.path.isdir(out_dir):
        raise CheckpointError(f"{out_dir}: is a file, not a folder to export into; nothing was replaced")
    if os.listdir(out_dir) and not any(os.path.isfile(os.path.join(out_dir, name)) for name in EXPORT_MARKERS):
        raise CheckpointError(
            f"{out_dir}: holds other files and is not an earlier export (no config.json); an export replaces the "
            "whole folder, so give a new or empty one"
        )
