"""KTO's maths (TRL's KTOTrainer): per-row losses of unpaired completions labelled desirable or undesirable, against
a reference and the KL estimate of mismatched completions.

With r = log π(y|x) − log π_ref(y|x) and z = the KL estimate (clamped at 0, no gradient), the KTO paper's eq. (7) as
TRL computes it: a desirable row's loss is ``desirable_weight`` × (1 − σ(β (r − z))), an undesirable row's
``undesirable_weight`` × (1 − σ(β (z − r))). ``apo_zero_unpaired`` (APO-zero on unpaired rows) has no KL term:
1 − σ(β r) and σ(β r). The step's loss is the mean over its rows, as TRL's ``losses.nanmean()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from honing.errors import ConfigError
from honing.methods.pair_losses import PairLoss, Terms

KTO_LOSS_TYPES = ("kto", "apo_zero_unpaired")


def kto_losses(
    logps: torch.Tensor,
    ref_logps: torch.Tensor,
    desirable: torch.Tensor,
    kl: torch.Tensor | float,
    *,
    beta: float = 0.1,
    loss_type: str = "kto",
    desirable_weight: float = 1.0,
    undesirable_weight: float = 1.0,
) -> torch.Tensor:
    """Each row's weighted KTO loss from its completion's summed log-probs under the policy and the reference, its
    label (True: desirable) and the KL estimate ``kl`` (ignored by ``apo_zero_unpaired``)."""
    if loss_type not in KTO_LOSS_TYPES:
        raise ConfigError(f"kto.loss_type: expected one of {', '.join(KTO_LOSS_TYPES)}, got {loss_type!r}")
    logratios = logps - ref_logps
    if loss_type == "kto":
        desirable_losses = 1 - F.sigmoid(beta * (logratios - kl))
        undesirable_losses = 1 - F.sigmoid(beta * (kl - logratios))
    else:
        desirable_losses = 1 - F.sigmoid(beta * logratios)
        undesirable_losses = F.sigmoid(beta * logratios)
    return torch.where(desirable, desirable_weight * desirable_losses, undesirable_weight * undesirable_losses)


def kl_sums(kl_logps: torch.Tensor, ref_kl_logps: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """The summed log-ratio of the real rows' mismatched completions and their count, as one tensor (2,): summed over
    ranks, their ratio is TRL's KL estimate (the mean over the batch, gathered over processes)."""
    ratios = torch.where(real, (kl_logps - ref_kl_logps.to(kl_logps.dtype)).detach(), 0.0)
    return torch.stack([ratios.sum(), real.sum().to(ratios.dtype)])


def kl_estimate(sums: torch.Tensor) -> torch.Tensor:
    """TRL's KL estimate from ``kl_sums`` (over one batch, all ranks): their mean, clamped at 0."""
    return (sums[0] / sums[1].clamp(min=1)).clamp(min=0)


@dataclass(frozen=True)
class KTOLoss(PairLoss):
    """KTO as a part of the pair step: column 0 of a row is its completion, column 1 the mismatched completion whose
    log-ratio estimates the KL; rewards β·(log π − log π_ref) of the completion."""

    section: ClassVar[str] = "kto"
    known_loss_types: ClassVar[tuple[str, ...]] = KTO_LOSS_TYPES
    uses_reference: ClassVar[bool] = True

    beta: float = 0.1
    loss_type: str = "kto"
    desirable_weight: float = 1.0
    undesirable_weight: float = 1.0

    @property
    def uses_kl(self) -> bool:
        """Whether the loss reads the KL estimate (``kto``; not ``apo_zero_unpaired``)."""
        return self.loss_type == "kto"

    def row_terms(
        self,
        logps: torch.Tensor,
        reference: tuple[torch.Tensor, torch.Tensor],
        desirable: torch.Tensor,
        kl: torch.Tensor,
    ) -> Terms:
        """``losses`` (per row), ``rewards`` (detached) and ``logps`` of each row's completion, from the policy's
        and the reference's log-probs (completion, mismatched completion), the labels and the KL estimate."""
        completion = logps[:, 0]
        ref_completion = reference[0].to(completion.dtype)
        losses = kto_losses(
            completion,
            ref_completion,
            desirable,
            kl,
            beta=self.beta,
            loss_type=self.loss_type,
            desirable_weight=self.desirable_weight,
            undesirable_weight=self.undesirable_weight,
        )
        return {"losses": losses, "rewards": self.beta * (completion - ref_completion).detach(), "logps": completion}
