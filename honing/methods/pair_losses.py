"""The losses a pair step can train with, each a part: DPO (against a reference), ORPO and CPO / SimPO (none).

A part turns the policy's log-probs of each pair's chosen and rejected completion (summed, with their token
counts), and the reference's where it uses one, into per-pair losses, the rewards TRL logs and its own per-pair
metrics; it also says how much of the chosen sequences' NLL the step adds. ``honing.methods.pairs`` runs the step
around any of them: the trainer and the step know no loss by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from honing.errors import ConfigError
from honing.losses import CPO_LOSS_TYPES, DPO_LOSS_TYPES, cpo_loss, cpo_rewards, dpo_loss, orpo_loss

Terms = dict[str, torch.Tensor]


@dataclass(frozen=True)
class PairLoss:
    """What every part says about itself; ``terms`` is its maths."""

    #: the config section its settings come from (named in error messages)
    section: ClassVar[str] = ""
    #: whether it compares against a reference model's log-probs
    uses_reference: ClassVar[bool] = False
    #: whether its NLL term counts the chosen sequence's prompt tokens too (ORPO, as TRL does), not the reply alone
    nll_on_prompt: ClassVar[bool] = False
    #: whether ``nll_loss`` (the chosen sequences' token-mean NLL) is one of its metrics (TRL's ORPO and CPO)
    reports_nll: ClassVar[bool] = False
    #: its per-pair values logged beside the rewards and log-probs (means over pairs, TRL's names)
    extra_metrics: ClassVar[tuple[str, ...]] = ()

    @property
    def nll_weight(self) -> float:
        """The weight of the chosen sequences' token-mean NLL added to the mean pair loss (0: none)."""
        return 0.0

    def terms(
        self, logps: torch.Tensor, lengths: torch.Tensor, reference: tuple[torch.Tensor, torch.Tensor] | None
    ) -> Terms:
        """``losses`` (per pair), ``chosen`` / ``rejected`` (the log-probs it logs), ``chosen_rewards`` /
        ``rejected_rewards`` (detached) and its ``extra_metrics``, from ``logps`` and ``lengths`` (pairs, 2)."""
        raise NotImplementedError


def token_means(logps: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Summed log-probs divided by their token counts (a pair with no tokens, a filler, keeps 0)."""
    return logps / lengths.clamp(min=1).to(logps.dtype)


@dataclass(frozen=True)
class DPOLoss(PairLoss):
    """TRL's DPO losses against the reference (``honing.losses.dpo_loss``), RPO's ``rpo_alpha`` × the chosen
    replies' NLL; rewards β·(logπ − logπref)."""

    section: ClassVar[str] = "dpo"
    uses_reference: ClassVar[bool] = True

    beta: float = 0.1
    loss_type: str = "sigmoid"
    label_smoothing: float = 0.0
    rpo_alpha: float | None = None

    def __post_init__(self) -> None:
        if self.loss_type not in DPO_LOSS_TYPES:
            raise ConfigError(f"dpo.loss_type: expected one of {', '.join(DPO_LOSS_TYPES)}, got {self.loss_type!r}")

    @property
    def nll_weight(self) -> float:
        """``rpo_alpha`` (0 when unset)."""
        return self.rpo_alpha or 0.0

    def terms(self, logps, lengths, reference):
        """DPO's loss of each pair against the reference's log-probs."""
        chosen, rejected = logps[:, 0], logps[:, 1]
        ref_chosen, ref_rejected = (ref.to(chosen.dtype) for ref in reference)
        losses = dpo_loss(
            chosen,
            rejected,
            ref_chosen,
            ref_rejected,
            beta=self.beta,
            loss_type=self.loss_type,
            label_smoothing=self.label_smoothing,
            chosen_lengths=lengths[:, 0],
            rejected_lengths=lengths[:, 1],
        )
        return {
            "losses": losses,
            "chosen": chosen,
            "rejected": rejected,
            "chosen_rewards": self.beta * (chosen - ref_chosen).detach(),
            "rejected_rewards": self.beta * (rejected - ref_rejected).detach(),
        }


@dataclass(frozen=True)
class ORPOLoss(PairLoss):
    """ORPO (TRL's ORPOTrainer): the chosen sequence's NLL (prompt and reply, as TRL computes it) plus
    −β·log σ(log odds ratio) of the token-mean log-probs; rewards β·(token-mean log-prob)."""

    section: ClassVar[str] = "orpo"
    nll_on_prompt: ClassVar[bool] = True
    reports_nll: ClassVar[bool] = True
    extra_metrics: ClassVar[tuple[str, ...]] = ("log_odds_ratio", "log_odds_chosen")

    beta: float = 0.1

    @property
    def nll_weight(self) -> float:
        """1: ORPO's loss is the NLL plus the odds-ratio term."""
        return 1.0

    def terms(self, logps, lengths, reference):
        """ORPO's odds-ratio term of each pair, from token-mean log-probs."""
        means = token_means(logps, lengths)
        chosen, rejected = means[:, 0], means[:, 1]
        losses, log_odds = orpo_loss(chosen, rejected, beta=self.beta)
        return {
            "losses": losses,
            "chosen": chosen,
            "rejected": rejected,
            "chosen_rewards": self.beta * chosen.detach(),
            "rejected_rewards": self.beta * rejected.detach(),
            "log_odds_ratio": F.logsigmoid(log_odds).detach(),  # TRL's name for log σ(log odds ratio)
            "log_odds_chosen": log_odds.detach(),  # and for the log odds ratio itself
        }


@dataclass(frozen=True)
class CPOLoss(PairLoss):
    """CPO and SimPO (TRL's CPOTrainer, ``honing.losses.cpo_loss``) plus ``cpo_alpha`` × the chosen replies' NLL;
    ``ipo`` and ``simpo`` on token-mean log-probs; rewards β·r(y)."""

    section: ClassVar[str] = "cpo"
    reports_nll: ClassVar[bool] = True

    beta: float = 0.1
    loss_type: str = "sigmoid"
    label_smoothing: float = 0.0
    cpo_alpha: float = 1.0
    simpo_gamma: float = 0.5
    alpha: float = 0.0

    def __post_init__(self) -> None:
        if self.loss_type not in CPO_LOSS_TYPES:
            raise ConfigError(f"cpo.loss_type: expected one of {', '.join(CPO_LOSS_TYPES)}, got {self.loss_type!r}")

    @property
    def nll_weight(self) -> float:
        """``cpo_alpha``."""
        return self.cpo_alpha

    def terms(self, logps, lengths, reference):
        """CPO's (or SimPO's) loss of each pair, from the policy's log-probs alone."""
        if self.loss_type in ("ipo", "simpo"):  # length-normalised, as TRL's average_log_prob
            logps = token_means(logps, lengths)
        chosen, rejected = logps[:, 0], logps[:, 1]
        losses = cpo_loss(
            chosen,
            rejected,
            beta=self.beta,
            loss_type=self.loss_type,
            label_smoothing=self.label_smoothing,
            simpo_gamma=self.simpo_gamma,
            alpha=self.alpha,
        )
        return {
            "losses": losses,
            "chosen": chosen,
            "rejected": rejected,
            "chosen_rewards": self.beta * cpo_rewards(chosen, self.alpha).detach(),
            "rejected_rewards": self.beta * cpo_rewards(rejected, self.alpha).detach(),
        }
