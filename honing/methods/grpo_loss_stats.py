"""The sums behind GRPO's KL and clipping metrics over a step's micro-batches (TRL's definitions)."""

from __future__ import annotations

import torch


class LossStats:
    """Token counts, KL and clipping of the step's last pass, summed over its micro-batches."""

    def __init__(self) -> None:
        self.totals = [torch.zeros(()) for _ in range(6)]  # tokens, kl, low, high, region, clip units
        self.low_per_sequence: list[torch.Tensor] = []
        self.high_per_sequence: list[torch.Tensor] = []
        self.metric = [torch.zeros(()), torch.zeros(())]  # a soft loss's own metric: its sum and its units

    def add(
        self,
        mask: torch.Tensor,
        ratio: torch.Tensor,
        advantages: torch.Tensor,
        kl: torch.Tensor | None,
        epsilon: float,
        epsilon_high: float,
        metric: torch.Tensor | None = None,
    ) -> None:
        """Add one micro-batch (TRL's clip-ratio definitions: low when ratio < 1−ε with A < 0, high when
        ratio > 1+ε_high with A > 0; with one ratio per sequence, fractions of sequences), and a soft loss's own
        ``metric`` (per token, or per sequence: TRL's masked mean)."""
        if metric is not None:
            self.add_metric(mask.float(), metric.detach().float())
        mask = mask.float()
        advantages = advantages.unsqueeze(1)
        low = ((ratio < 1 - epsilon) & (advantages < 0)).float()
        high = ((ratio > 1 + epsilon_high) & (advantages > 0)).float()
        region = ((low + high) > 0).float()
        units = mask if ratio.shape[-1] == mask.shape[-1] else (mask.sum(-1, keepdim=True) > 0).float()
        values = [mask.sum(), (kl.detach() * mask).sum() if kl is not None else torch.zeros(())]
        values += [(low * units).sum(), (high * units).sum(), (region * units).sum(), units.sum()]
        self.totals = [total + value.detach().float().cpu() for total, value in zip(self.totals, values)]
        tokens = units.sum(-1)
        self.low_per_sequence.append(((low * units).sum(-1) / tokens).detach())
        self.high_per_sequence.append(((high * units).sum(-1) / tokens).detach())

    def sums(self) -> list[torch.Tensor]:
        """The six sums (tokens, kl, low, high, region, clip units)."""
        return self.totals

    def add_metric(self, mask: torch.Tensor, values: torch.Tensor) -> None:
        """Add a soft loss's metric: per token over the completion tokens, per sequence over the sequences."""
        if values.shape[-1] == mask.shape[-1]:
            value_sum, units = (values * mask).sum(), mask.sum()
        else:
            value_sum, units = values.sum(), torch.tensor(float(values.shape[0]))
        self.metric = [self.metric[0] + value_sum.cpu(), self.metric[1] + units.cpu()]
