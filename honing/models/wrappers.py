"""Reach through the wrappers put around a model: DDP and torch.compile outside, peft around a LoRA model.

FSDP2 is not a wrapper: ``fully_shard`` changes modules in place, so a sharded model is its own unwrapped model.
"""

from __future__ import annotations

import sys

from torch import nn


def unwrap_model(model: nn.Module) -> nn.Module:
    """The model as the recipe built it (a peft model for LoRA) without its DDP / torch.compile wrappers."""
    while True:
        # DDP keeps the model as .module, torch.compile as ._orig_mod (its __len__ raises: no `or` on modules)
        inner = getattr(model, "module", None)
        if not isinstance(inner, nn.Module):
            inner = getattr(model, "_orig_mod", None)
        if not isinstance(inner, nn.Module):
            return model
        model = inner


def transformers_model(model: nn.Module) -> nn.Module:
    """The Hugging Face transformers model itself, inside DDP / torch.compile and peft wrappers (for LoRA: the
    model whose layers peft injected the adapters into)."""
    model = unwrap_model(model)
    get_base_model = getattr(type(model), "get_base_model", None)  # on the class: peft's __getattr__ forwards
    return get_base_model(model) if get_base_model is not None else model


def is_lora(model: nn.Module) -> bool:
    """True when ``model`` (inside any DDP / torch.compile wrapper) is a peft model."""
    # A model can only be a PeftModel once peft is imported; not importing it keeps plain runs fast.
    if "peft" not in sys.modules:
        return False
    from peft import PeftModel

    return isinstance(unwrap_model(model), PeftModel)
