"""Offloading to host memory on CUDA (``parallel.offload``, ``parallel.activation_offload``): what can wait in
pinned host memory instead of GPU memory, and the one-line refusals where it cannot save anything."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from honing.errors import ConfigError

if TYPE_CHECKING:
    from torch.distributed.fsdp import OffloadPolicy

OFFLOADS = ("none", "optimizer", "params")


def check_offload(offload: str, activation_offload: bool, *, device: torch.device, strategy: str) -> None:
    """Refuse, in one line naming the key, an offload this run cannot use: any on CPU (the weights, states and
    activations are in host memory already), ``params`` without FSDP2."""
    if offload not in OFFLOADS:
        raise ConfigError(f"parallel.offload: expected one of {', '.join(OFFLOADS)}, got {offload!r}")
    if activation_offload and device.type != "cuda":
        raise ConfigError(
            f"parallel.activation_offload: true moves saved activations from the GPU to host memory; this run is "
            f"on {device.type}, where they are in host memory already: remove it (or use "
            "parallel.activation_checkpointing to save memory here)"
        )
    if offload == "none":
        return
    if device.type != "cuda":
        raise ConfigError(
            f"parallel.offload: {offload!r} moves GPU memory to the host; this run is on {device.type}, where "
            "everything is in host memory already: set parallel.offload: none"
        )
    if offload == "params" and strategy != "fsdp":
        raise ConfigError(
            "parallel.offload: 'params' is FSDP2's CPUOffloadPolicy and needs parallel.strategy fsdp (or auto) "
            f"with several processes; this run resolves to {strategy!r}"
        )


def offload_policy(offload: str) -> OffloadPolicy:
    """FSDP2's offload policy: ``params`` keeps each shard, its gradient and so the optimizer step on the host
    (pinned, so the per-block copies to the GPU overlap compute); anything else keeps them on the device."""
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy

    return CPUOffloadPolicy(pin_memory=True) if offload == "params" else OffloadPolicy()


def offload_block_activations(block: nn.Module) -> None:
    """Keep what ``block``'s forward saves for backward in pinned host memory (``save_on_cpu``), copied back to
    the GPU in backward. The forward is replaced on the instance, as activation checkpointing does, so parameter
    names do not change; a checkpointed block saves only its inputs, and those are offloaded."""
    forward = block.forward

    def offloaded_forward(*args: object, **kwargs: object) -> object:
        if not (block.training and torch.is_grad_enabled()):
            return forward(*args, **kwargs)
        # pinned host memory lets the copies back to the GPU overlap compute (there is nothing to pin without one)
        with torch.autograd.graph.save_on_cpu(pin_memory=torch.cuda.is_available()):
            return forward(*args, **kwargs)

    block.forward = offloaded_forward
