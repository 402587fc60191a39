"""The sums behind GRPO's KL and clipping metrics over a step's micro-batches (TRL's definitions), kept as one tensor
on the loss's device: a few operators a micro-batch and no host copy until the step's metrics read them."""

from __future__ import annotations

import torch


class LossStats:
    """Token counts, KL and clipping of the step's last pass, summed over its micro-batches."""

    def __init__(self) -> None:
        self.totals: torch.Tensor | None = None  # tokens, kl, low, high, region, clip units (None: nothing added)
        #: per micro-batch, each sequence's (low, high) clipped fraction of its units, ``(2, rows)``
        self.clipped_per_sequence: list[torch.Tensor] = []
        self._metric: torch.Tensor | None = None  # a soft loss's own metric: its sum and its units

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
        mask = mask.float()
        if metric is not None:
            self.add_metric(mask, metric.detach().float())
        advantages = advantages.unsqueeze(1)
        low = (ratio < 1 - epsilon) & (advantages < 0)
        high = (ratio > 1 + epsilon_high) & (advantages > 0)
        units = mask if ratio.shape[-1] == mask.shape[-1] else (mask.sum(-1, keepdim=True) > 0).float()
        # (low, high, region) per sequence in one pass: 0/1 counts, so every sum is exact whatever its order
        per_sequence = (torch.stack([low, high, low | high]) * units).sum(-1)
        tokens = units.sum(-1)
        kl_sum = (kl.detach() * mask).sum() if kl is not None else mask.new_zeros(())
        values = torch.cat([torch.stack([mask.sum(), kl_sum]), per_sequence.sum(-1), tokens.sum().reshape(1)])
        # ``+ 0.0`` on the first as ``0 + x`` before: a -0.0 sum reads 0.0, the same bits as summed from zero
        self.totals = values + 0.0 if self.totals is None else self.totals + values
        self.clipped_per_sequence.append(per_sequence[:2] / tokens)

    def sums(self) -> torch.Tensor:
        """The six sums (tokens, kl, low, high, region, clip units), one tensor."""
        return torch.zeros(6) if self.totals is None else self.totals

    @property
    def metric(self) -> torch.Tensor:
        """A soft loss's metric: its sum and its units (zeros, beside the sums, when none was added)."""
        if self._metric is None:
            return torch.zeros(2, device=None if self.totals is None else self.totals.device)
        return self._metric

    def add_metric(self, mask: torch.Tensor, values: torch.Tensor) -> None:
        """Add a soft loss's metric: per token over the completion tokens, per sequence over the sequences."""
        if values.shape[-1] == mask.shape[-1]:
            pair = torch.stack([(values * mask).sum(), mask.sum()])
        else:
            pair = torch.stack([values.sum(), values.new_tensor(float(values.shape[0]))])
        self._metric = pair + 0.0 if self._metric is None else self._metric + pair
