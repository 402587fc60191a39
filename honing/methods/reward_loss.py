"""The reward model's loss part: Bradley–Terry on each pair's two sequence rewards, as TRL's RewardTrainer computes it.

A pair's loss is −log σ(r_chosen − r_rejected − margin) (the margin a row's own ``margin`` column, 0 without one),
plus ``center_rewards_coefficient`` × (r_chosen + r_rejected)², which pulls the rewards towards mean zero (Eisenstein
et al. 2023, Eq. 2). The mean over pairs is TRL's loss exactly: TRL takes the mean of both terms over the batch.
``honing.methods.reward.RewardTrainModule`` runs it inside the pair step; the trainer never knows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from honing.methods.pair_losses import PairLoss, Terms


def reward_loss(
    chosen: torch.Tensor,
    rejected: torch.Tensor,
    *,
    margins: torch.Tensor | None = None,
    center_rewards_coefficient: float | None = None,
) -> torch.Tensor:
    """Per-pair losses from the chosen and rejected sequences' rewards (pairs,); their mean is TRL's loss."""
    difference = chosen - rejected
    if margins is not None:
        difference = difference - margins.to(difference.dtype)
    losses = -F.logsigmoid(difference)
    if center_rewards_coefficient is not None:
        losses = losses + center_rewards_coefficient * (chosen + rejected) ** 2
    return losses


@dataclass(frozen=True)
class RewardLoss(PairLoss):
    """Bradley–Terry on the sequence rewards of a one-label score head (``reward_loss``); no reference, no NLL."""

    section: ClassVar[str] = "reward"

    center_rewards_coefficient: float | None = None

    def terms(self, logps, lengths, reference, *, margins: torch.Tensor | None = None) -> Terms:  # type: ignore[override]
        """``losses`` and the detached rewards from ``logps``, here each pair's two sequence rewards (pairs, 2);
        ``margins``: each pair's margin (pairs,) or None."""
        chosen, rejected = logps[:, 0], logps[:, 1]
        losses = reward_loss(
            chosen, rejected, margins=margins, center_rewards_coefficient=self.center_rewards_coefficient
        )
        return {
            "losses": losses,
            "chosen_rewards": chosen.detach(),
            "rejected_rewards": rejected.detach(),
        }
