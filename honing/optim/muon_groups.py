"""Muon's parameter groups and its own knobs: the hidden matrices for Muon, the rest for AdamW, the AdamW half's
learning rate split by what a parameter is (output head, input embeddings, 1-D scalars: olmOCR's multipliers)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from honing.optim.muon_adamw import USE_MUON

if TYPE_CHECKING:
    from honing.config.optim_schema import OptimSection


@dataclass(frozen=True)
class MuonKnobs:
    """``optim.muon_*``: Nesterov momentum, Newton-Schulz steps, the LR adjustment, the AdamW half's LR and its
    multipliers (torch.optim.Muon's and Keller Jordan's defaults where None)."""

    nesterov: bool = True
    ns_steps: int = 5
    adjust_lr: str = "match_rms_adamw"
    adamw_lr: float | None = None
    head_multiplier: float = 1.0
    embed_multiplier: float = 1.0
    scalar_multiplier: float = 1.0

    @classmethod
    def from_config(cls, optim: OptimSection) -> MuonKnobs:
        """The knobs of an ``OptimSection`` (its ``muon_*`` keys, defaults where None)."""
        given = {
            "nesterov": optim.muon_nesterov,
            "ns_steps": optim.muon_ns_steps,
            "adjust_lr": optim.muon_adjust_lr,
            "adamw_lr": optim.muon_adamw_lr,
            "head_multiplier": optim.muon_lr_multiplier_head,
            "embed_multiplier": optim.muon_lr_multiplier_embed,
            "scalar_multiplier": optim.muon_lr_multiplier_scalar,
        }
        return cls(**{name: value for name, value in given.items() if value is not None})


def muon_groups(
    param_groups: list[dict[str, Any]], model: torch.nn.Module, knobs: MuonKnobs, lr: float
) -> list[dict[str, Any]]:
    """Each group split in two: its 2-D weights but the input embedding and the output head for Muon, the rest for
    AdamW, whose LR (the group's own, else ``knobs.adamw_lr``, else ``lr``) is multiplied per kind of parameter."""
    embed = model.get_input_embeddings()
    head = model.get_output_embeddings()
    embed_ids = {id(embed.weight)} if embed is not None else set()
    head_ids = {id(head.weight)} - embed_ids if head is not None else set()  # a tied head is the embedding

    def kind(param: torch.Tensor) -> str:
        if id(param) in embed_ids:
            return "embed"
        if id(param) in head_ids:
            return "head"
        return "scalar" if param.ndim < 2 else "matrix" if param.ndim == 2 else "other"

    multipliers = {"embed": knobs.embed_multiplier, "head": knobs.head_multiplier, "scalar": knobs.scalar_multiplier,
                   "other": 1.0}  # fmt: skip
    split = []
    for group in param_groups:
        kinds = [kind(param) for param in group["params"]]
        split.append({**group, "params": [p for p, k in zip(group["params"], kinds) if k == "matrix"], USE_MUON: True})
        base = group.get("lr", knobs.adamw_lr if knobs.adamw_lr is not None else lr)
        for name, multiplier in multipliers.items():
            params = [p for p, k in zip(group["params"], kinds) if k == name]
            adamw = {**group, "params": params, USE_MUON: False}
            if base != lr or multiplier != 1.0 or "lr" in group:
                adamw["lr"] = base * multiplier
            split.append(adamw)
    return [group for group in split if group["params"]]
