"""Write a model and its tokenizer as a Hugging Face folder that ``from_pretrained`` loads."""

from __future__ import annotations

import os
import shutil
from typing import Any

import torch


def unwrap_model(model: torch.nn.Module) -> torch.nn.Module:
    """The Hugging Face model inside DDP / torch.compile wrappers."""
    while True:
        inner = getattr(model, "module", None) or getattr(model, "_orig_mod", None)
        if inner is None:
            return model
        model = inner


def export_hf(model: torch.nn.Module, tokenizer: Any, out_dir: str, *, state_dict: dict[str, Any] | None = None) -> str:
    """Save safetensors weights, config, generation config and tokenizer to ``out_dir``.

    Written to a temporary sibling first and swapped in, so an interrupted export never leaves
    a half-written folder where a good one was. A LoRA (peft) model is exported merged, so the
    folder is always a full model.
    """
    from transformers.utils import logging as hf_logging

    from honing.models.lora import is_lora  # lora.py and merge.py import this module
    from honing.models.merge import merged_model, merged_state_dict

    hf_logging.disable_progress_bar()  # a progress bar for one small shard is noise in the run's log
    model = unwrap_model(model)
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


def swap_into_place(tmp: str, out_dir: str) -> str:
    """Replace ``out_dir`` (if any) with the finished folder ``tmp``; the old one goes only once the new is in."""
    old = f"{out_dir.rstrip('/')}.old"
    if os.path.exists(out_dir):
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out_dir, old)
    os.replace(tmp, out_dir)
    shutil.rmtree(old, ignore_errors=True)
    return out_dir
