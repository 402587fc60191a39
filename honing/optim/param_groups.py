"""AdamW parameter groups: no weight decay on biases, norms and embeddings."""

from __future__ import annotations

from typing import Any

import torch

NO_DECAY_NAME_PARTS = ("bias", "norm", "embed", "wte", "wpe", "ln_")


def decays(name: str, param: torch.nn.Parameter) -> bool:
    """True for weight matrices; vectors, norms and embeddings are not decayed (as in GPT-2/LLaMA)."""
    lowered = name.lower()
    return param.ndim >= 2 and not any(part in lowered for part in NO_DECAY_NAME_PARTS)


def build_param_groups(model: torch.nn.Module, *, weight_decay: float) -> list[dict[str, Any]]:
    """Two groups of trainable parameters: decayed and not decayed (empty groups are dropped)."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (decay if decays(name, param) else no_decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay, "name": "decay"},
              {"params": no_decay, "weight_decay": 0.0, "name": "no_decay"}]
    return [group for group in groups if group["params"]]


def build_adamw(model: torch.nn.Module, *, lr: float, weight_decay: float, betas: tuple[float, float],
                eps: float, fused: bool | None = None) -> torch.optim.AdamW:
    """AdamW over ``build_param_groups``; each group remembers its base LR as ``initial_lr``.

    ``fused=None`` picks torch's fused kernel where it exists (CPU and CUDA): one kernel for all
    parameters instead of a loop of small ops, the largest optimizer cost for small models.
    """
    groups = build_param_groups(model, weight_decay=weight_decay)
    if fused is None:
        fused = all(p.device.type in ("cpu", "cuda") for g in groups for p in g["params"])
    optimizer = torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused)
    for group in optimizer.param_groups:
        group.setdefault("initial_lr", group["lr"])
    return optimizer
