"""The one place an optimizer is built from ``optim.*``: the name (or its Hugging Face alias) picks torch's
optimizer, ``build_param_groups`` gives the groups, and every group remembers its base LR as ``initial_lr`` for
the schedule. Extensions of an optimizer (e.g. 8-bit AdamW states) belong in its function here.

Which optimizers and why: AdamW (fused on CPU / CUDA, foreach otherwise), SGD with momentum, Adafactor and Muon
are all torch's own (``torch.optim``, torch 2.14): no extra dependency, and their state dicts checkpoint through
DCP like AdamW's. Lion is not in torch; Muon (in torch since 2.9) is the newer of the two and is offered instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from honing.config.optimizers import resolve_optimizer
from honing.errors import ConfigError
from honing.models import unwrap_model
from honing.models.quantize import require_torchao
from honing.optim.muon_adamw import MuonWithAdamW
from honing.optim.muon_groups import MuonKnobs, muon_groups
from honing.optim.param_groups import adamw_kernels, build_param_groups

if TYPE_CHECKING:
    from honing.config.optim_schema import OptimSection


@dataclass(frozen=True)
class OptimizerSettings:
    """What ``optim.*`` says about the optimizer itself (the groups come from ``build_param_groups``)."""

    name: str = "adamw"
    lr: float = 3e-4
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    fused: bool | None = None
    momentum: float | None = None  # sgd: 0.9, muon: 0.95 when None
    muon: MuonKnobs | None = None  # muon: its own settings (None: the defaults)
    state_dtype: str | None = None  # adamw: int8 for 8-bit moments (honing.optim.low_bit)
    bf16_stochastic_round: bool = False
    offload: bool = False  # parallel.offload: optimizer: AdamW's states and update in host memory

    @classmethod
    def from_config(cls, optim: OptimSection, *, offload: bool = False) -> OptimizerSettings:
        """The settings of an ``OptimSection`` (``offload``: ``parallel.offload`` is ``optimizer``)."""
        return cls(
            offload=offload,
            name=optim.name,
            lr=optim.lr,
            weight_decay=optim.weight_decay,
            betas=tuple(optim.betas),
            eps=optim.eps,
            fused=optim.fused,
            momentum=optim.momentum,
            muon=MuonKnobs.from_config(optim),
            state_dtype=optim.state_dtype,
            bf16_stochastic_round=optim.bf16_stochastic_round,
        )


def build_optimizer(
    model: torch.nn.Module, settings: OptimizerSettings, *, groups: Sequence[Mapping[str, Any]] | None = None
) -> torch.optim.Optimizer:
    """The optimizer ``settings.name`` names over the model's trainable parameters (``groups``: as for
    ``build_param_groups``); each group gets ``initial_lr``."""
    name, implied_fused = resolve_optimizer(settings.name)
    fused = settings.fused if settings.fused is not None else implied_fused
    param_groups = build_param_groups(model, weight_decay=settings.weight_decay, groups=groups)
    params = [p for group in param_groups for p in group["params"]]
    if settings.offload and name != "adamw":
        raise ConfigError(
            f"parallel.offload: 'optimizer' keeps AdamW's states on the host; optim.name {settings.name!r} has no "
            "offloaded version: use optim.name: adamw, or parallel.offload: params (FSDP2 on several GPUs)"
        )
    if name == "adamw":
        optimizer = adamw(param_groups, params, settings, fused)
    elif name == "sgd":
        momentum = 0.9 if settings.momentum is None else settings.momentum
        optimizer = torch.optim.SGD(param_groups, lr=settings.lr, momentum=momentum, fused=fused)
    elif name == "adafactor":
        optimizer = torch.optim.Adafactor(param_groups, lr=settings.lr, weight_decay=settings.weight_decay)
    else:
        optimizer = muon(model, param_groups, params, settings, fused)
    for group in optimizer.param_groups:
        group.setdefault("initial_lr", group["lr"])
    return optimizer


def adamw(
    param_groups: list[dict[str, Any]],
    params: list[torch.nn.Parameter],
    settings: OptimizerSettings,
    fused: bool | None,
) -> torch.optim.AdamW:
    """torch's AdamW; ``fused=None`` picks the fused kernel where it exists (CPU and CUDA): one kernel for all
    parameters instead of a loop of small ops, the largest optimizer cost for small models; ``state_dtype: int8``:
    torchao's 8-bit states (``honing.optim.low_bit``); ``offload``: the states and update on the host
    (``honing.optim.host_offload``)."""
    if settings.offload:
        if settings.state_dtype is not None:
            raise ConfigError(
                "optim.state_dtype: int8 states are not offloaded (parallel.offload: optimizer keeps torch's AdamW "
                "states on the host, where they cost no GPU memory): remove one of the two"
            )
        from honing.optim.host_offload import HostOffloadAdamW

        return HostOffloadAdamW(param_groups, lr=settings.lr, betas=settings.betas, eps=settings.eps, fused=fused)
    if settings.state_dtype == "int8":
        if fused:
            raise ConfigError(
                "optim.fused: torch's fused AdamW kernel does not apply with optim.state_dtype: int8 (torchao's own "
                "update); remove optim.fused or use optim.name: adamw"
            )
        require_torchao("optim.state_dtype")
        from honing.optim.low_bit import adamw_8bit

        return adamw_8bit(
            param_groups,
            lr=settings.lr,
            betas=settings.betas,
            eps=settings.eps,
            bf16_stochastic_round=settings.bf16_stochastic_round,
        )
    fused, foreach = adamw_kernels(params, fused)
    return torch.optim.AdamW(
        param_groups, lr=settings.lr, betas=settings.betas, eps=settings.eps, fused=fused, foreach=foreach
    )


def muon(
    model: torch.nn.Module,
    param_groups: list[dict[str, Any]],
    params: list[torch.nn.Parameter],
    settings: OptimizerSettings,
    fused: bool | None,
) -> MuonWithAdamW:
    """Muon for every trainable 2-D weight that is not the input embedding or the output head; AdamW for the rest
    (embeddings, head, norms, biases, other shapes), each user group split in two with its own LR and decay."""
    if any(getattr(p, "device_mesh", None) is not None for p in params):
        raise ConfigError(
            "optim.name: muon orthogonalizes whole weight matrices, and this run shards them (FSDP2 or tensor "
            "parallelism); use parallel.strategy: ddp (or none) with muon, or another optimizer"
        )
    inner = unwrap_model(model)  # DDP / peft wrappers do not forward get_input_embeddings
    knobs = settings.muon or MuonKnobs()
    split = muon_groups(param_groups, inner, knobs, settings.lr)
    momentum = 0.95 if settings.momentum is None else settings.momentum
    return MuonWithAdamW(
        split,
        lr=settings.lr,
        weight_decay=settings.weight_decay,
        momentum=momentum,
        betas=settings.betas,
        eps=settings.eps,
        fused=all(p.device.type in ("cpu", "cuda") for p in params) if fused is None else fused,
        nesterov=knobs.nesterov,
        ns_steps=knobs.ns_steps,
        adjust_lr=knobs.adjust_lr,
    )
