"""AdamW parameter groups: no weight decay on biases, norms and embeddings; user groups with their own LR."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch

from honing.errors import ConfigError
from honing.models.param_names import example_names, matches, named_parameters

NO_DECAY_NAME_PARTS = ("bias", "norm", "embed", "wte", "wpe", "ln_")


def decays(name: str, param: torch.nn.Parameter) -> bool:
    """True for weight matrices; vectors, norms and embeddings are not decayed (as in GPT-2/LLaMA)."""
    lowered = name.lower()
    return param.ndim >= 2 and not any(part in lowered for part in NO_DECAY_NAME_PARTS)


def build_param_groups(
    model: torch.nn.Module, *, weight_decay: float, groups: Sequence[Mapping[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Trainable parameters in torch optimizer groups (empty groups are dropped).

    Each of ``groups`` (``optim.param_groups``: ``{"params": pattern(s) or the tensors themselves (VeOmni's
    ``build_param_groups``), "lr": float | None,
    "weight_decay": float | None}``) takes the parameters whose names match its fnmatch patterns, first
    group first; its ``lr`` (if set) replaces the optimizer's, its ``weight_decay`` (if set) applies to
    all its parameters, else it is split by the default rule into ``param_groups.I`` (decayed) and
    ``param_groups.I.no_decay``. The remaining parameters form ``decay`` and ``no_decay``. Frozen
    parameters are in no group.
    """
    trainable = [(name, param) for name, param in named_parameters(model) if param.requires_grad]
    remaining = trainable
    out: list[dict[str, Any]] = []
    for index, spec in enumerate(groups or []):
        spec = spec.model_dump() if hasattr(spec, "model_dump") else spec  # a ParamGroupSection works too
        takes, patterns = _selector(spec["params"])
        key = f"optim.param_groups[{index}].params"
        if not any(takes(name, param) for name, param in trainable):
            raise ConfigError(
                f"{key}: {patterns} matches no trainable parameter; trainable parameter names "
                f"look like {example_names([name for name, _ in trainable] or ['(none)'])}"
            )
        mine = [(name, param) for name, param in remaining if takes(name, param)]
        if not mine:
            raise ConfigError(f"{key}: {patterns} matches only parameters that an earlier group already took")
        remaining = [(name, param) for name, param in remaining if not takes(name, param)]
        extra = {"lr": spec["lr"]} if spec.get("lr") is not None else {}
        group_name = f"param_groups.{index}"
        if spec.get("weight_decay") is not None:
            out.append(
                {
                    "params": [param for _, param in mine],
                    "weight_decay": spec["weight_decay"],
                    "name": group_name,
                    **extra,
                }
            )
        else:
            out.extend(split_by_decay(mine, weight_decay, group_name, f"{group_name}.no_decay", extra))
    out.extend(split_by_decay(remaining, weight_decay, "decay", "no_decay", {}))
    return [group for group in out if group["params"]]


def split_by_decay(
    params: list[tuple[str, torch.nn.Parameter]],
    weight_decay: float,
    decay_name: str,
    no_decay_name: str,
    extra: dict[str, Any],
) -> list[dict[str, Any]]:
    """Two groups: parameters that ``decays`` and those that do not."""
    decay = [param for name, param in params if decays(name, param)]
    no_decay = [param for name, param in params if not decays(name, param)]
    return [
        {"params": decay, "weight_decay": weight_decay, "name": decay_name, **extra},
        {"params": no_decay, "weight_decay": 0.0, "name": no_decay_name, **extra},
    ]


def adamw_kernels(params: list[torch.nn.Parameter], fused: bool | None) -> tuple[bool | None, bool | None]:
    """``(fused, foreach)`` for torch's AdamW over ``params``: ``fused=None`` picks the fused kernel where it exists
    (CPU and CUDA), one kernel for all parameters instead of a loop of small ops, the largest optimizer cost for
    small models."""
    if len({getattr(p, "device_mesh", None) for p in params}) > 1:
        # weights split over different meshes (tensor or expert parallelism beside plain or FSDP2-only weights):
        # a fused or foreach kernel takes all of a group's tensors in one call, which DTensor refuses across meshes
        return False, False
    if fused is None:
        return all(p.device.type in ("cpu", "cuda") for p in params), None
    return fused, None


def build_adamw(
    model: torch.nn.Module,
    *,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float],
    eps: float,
    fused: bool | None = None,
    groups: Sequence[Mapping[str, Any]] | None = None,
) -> torch.optim.AdamW:
    """AdamW over ``build_param_groups`` (what ``honing.optim.builder`` builds for ``optim.name: adamw``); each
    group remembers its base LR as ``initial_lr``; ``fused=None`` picks torch's fused kernel where it exists."""
    param_groups = build_param_groups(model, weight_decay=weight_decay, groups=groups)
    fused, foreach = adamw_kernels([p for g in param_groups for p in g["params"]], fused)
    optimizer = torch.optim.AdamW(param_groups, lr=lr, betas=betas, eps=eps, fused=fused, foreach=foreach)
    for group in optimizer.param_groups:
        group.setdefault("initial_lr", group["lr"])
    return optimizer


def _selector(
    params: str | torch.Tensor | Iterable[str | torch.Tensor],
) -> tuple[Callable[[str, torch.Tensor], bool], str]:
    """What a group's ``params`` takes: parameters whose names match its patterns, or the very tensors it lists
    (VeOmni's ``build_param_groups`` returns ``model.visual.parameters()``), and how to name it in an error."""
    if isinstance(params, str):
        patterns = [params]
    else:
        listed = [params] if isinstance(params, torch.Tensor) else list(params)
        if any(isinstance(item, torch.Tensor) for item in listed):
            ids = {id(item) for item in listed}
            return (lambda name, param: id(param) in ids), f"a list of {len(ids)} tensor(s)"
        patterns = listed
    return (lambda name, param: matches(name, patterns)), str(patterns)
