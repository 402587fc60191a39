"""The token entropies of GRPO's ``top_entropy_quantile`` (Beyond the 80/20 Rule, TRL's key): only the completion
tokens whose entropy is in the top ρ quantile over every rank's micro-batch train the policy."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from honing.distributed import is_distributed

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup


def token_entropies(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """The entropy (nats) of softmax(logits / temperature) at each position, in float32 (as TRL scores tokens at the
    sampling temperature)."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    log_probs = logits.log_softmax(-1)
    return -(log_probs.exp() * log_probs).sum(-1)


def high_entropy_mask(
    entropies: torch.Tensor,
    mask: torch.Tensor,
    quantile: float,
    group: ProcessGroup | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Where ``mask`` is set and the entropy is at least the ``quantile`` of every rank's masked entropies (TRL's
    ``get_high_entropy_mask`` with threshold 1 − top_entropy_quantile); all False when no token is masked in."""
    values = gather_uneven(entropies[mask.bool()].detach().float(), group, device)
    if values.numel() == 0:
        return torch.zeros_like(entropies, dtype=torch.bool)
    threshold = torch.quantile(values, quantile)
    return ((entropies * mask.float()) >= threshold.to(entropies.device)) & mask.bool()


def gather_uneven(
    values: torch.Tensor, group: ProcessGroup | None = None, device: torch.device | str | None = None
) -> torch.Tensor:
    """Every rank's 1-D ``values`` (of any length) concatenated in rank order; itself in one process."""
    if not is_distributed():
        return values
    local = values.to(device or values.device)
    sizes = [
        torch.zeros(1, dtype=torch.long, device=local.device) for _ in range(torch.distributed.get_world_size(group))
    ]
    torch.distributed.all_gather(sizes, torch.tensor([local.numel()], device=local.device), group=group)
    longest = int(max(size.item() for size in sizes))
    padded = torch.zeros(longest, dtype=local.dtype, device=local.device)
    padded[: local.numel()] = local
    parts = [torch.empty_like(padded) for _ in sizes]
    torch.distributed.all_gather(parts, padded, group=group)
    return torch.cat([part[: int(size.item())] for part, size in zip(parts, sizes)]).to(values.device)
