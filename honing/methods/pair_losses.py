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

from honing.dpo_losses import DPO_LOSS_TYPES, SORTING_LOSS_TYPES, dpo_loss, wpo_weights
from honing.errors import ConfigError
from honing.losses import CPO_LOSS_TYPES, cpo_loss, cpo_rewards, orpo_loss
from honing.methods.dpo_token_terms import length_desensitized, with_tail_targets

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
    #: the ``loss_type`` names it knows (none: it has no ``loss_type``)
    known_loss_types: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        for name in self.loss_types:
            if name not in self.known_loss_types:
                raise ConfigError(
                    f"{self.section}.loss_type: expected one of {', '.join(self.known_loss_types)}, got {name!r}"
                )

    @property
    def loss_types(self) -> tuple[str, ...]:
        """Its ``loss_type`` as a tuple: one, several (DPO's list), or none (a part without the key)."""
        loss_type = getattr(self, "loss_type", ())
        return (loss_type,) if isinstance(loss_type, str) else tuple(loss_type)

    @property
    def nll_weight(self) -> float:
        """The weight of the chosen sequences' token-mean NLL added to the mean pair loss (0: none)."""
        return 0.0

    @property
    def needs_square_sums(self) -> bool:
        """Whether ``terms`` reads each completion's sum of log Σ_v p(v)² (``square_sums``)."""
        return False

    def with_targets(self, micro: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """A micro-batch with the target columns the part reads besides the chosen and rejected replies'."""
        return micro

    def sequence_logps(self, logps: torch.Tensor) -> torch.Tensor:
        """The chosen and rejected log-probs (pairs, 2) the part compares, from the columns it scored: what a
        reference stores."""
        return logps[:, :2]

    def terms(
        self,
        logps: torch.Tensor,
        lengths: torch.Tensor,
        reference: tuple[torch.Tensor, torch.Tensor] | None,
        square_sums: torch.Tensor | None = None,
    ) -> Terms:
        """``losses`` (per pair), ``chosen`` / ``rejected`` (the log-probs it logs), ``chosen_rewards`` /
        ``rejected_rewards`` (detached) and its ``extra_metrics``, from ``logps`` and ``lengths`` (pairs, K: the
        chosen and rejected replies first, then the columns ``with_targets`` adds)."""
        raise NotImplementedError


def token_means(logps: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Summed log-probs divided by their token counts (a pair with no tokens, a filler, keeps 0)."""
    return logps / lengths.clamp(min=1).to(logps.dtype)


@dataclass(frozen=True)
class DPOLoss(PairLoss):
    """TRL's DPO losses against the reference (``honing.dpo_losses``): one ``loss_type`` or the ``loss_weights``
    weighted sum of several (MPO), on f-DPO's scores, LD-DPO's reply log-probs (``ld_alpha``: the logps columns
    2 and 3 are the replies' tails, ``with_tail_targets``), each pair weighted by WPO's weights (``use_weighting``);
    ``sft`` in the list, and RPO's ``rpo_alpha``, weigh the chosen replies' NLL; rewards β·(logπ − logπref)."""

    section: ClassVar[str] = "dpo"
    known_loss_types: ClassVar[tuple[str, ...]] = DPO_LOSS_TYPES
    uses_reference: ClassVar[bool] = True

    beta: float = 0.1
    loss_type: str | tuple[str, ...] = "sigmoid"
    loss_weights: tuple[float, ...] | None = None
    label_smoothing: float = 0.0
    rpo_alpha: float | None = None
    f_divergence_type: str = "reverse_kl"
    f_alpha_divergence_coef: float = 0.5
    discopop_tau: float = 0.05
    ld_alpha: float | None = None
    use_weighting: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.weights) != len(self.loss_types):
            raise ConfigError(
                f"dpo.loss_weights: {len(self.weights)} weights for {len(self.loss_types)} loss types; give one each"
            )
        if self.use_weighting and {"sft", *SORTING_LOSS_TYPES} & set(self.loss_types):
            raise ConfigError("dpo.use_weighting: not available with loss_type sft, aot or aot_unpaired; remove one")

    @property
    def weights(self) -> tuple[float, ...]:
        """Each loss type's weight (1 each when ``loss_weights`` is unset, as TRL)."""
        return tuple(self.loss_weights) if self.loss_weights is not None else (1.0,) * len(self.loss_types)

    @property
    def nll_weight(self) -> float:
        """``rpo_alpha`` (0 when unset) plus the weights of ``sft`` in the loss types."""
        sft = sum(weight for name, weight in zip(self.loss_types, self.weights, strict=True) if name == "sft")
        return (self.rpo_alpha or 0.0) + sft

    @property
    def needs_square_sums(self) -> bool:
        """WPO's weights read each reply position's log Σ p²."""
        return self.use_weighting

    def with_targets(self, micro: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """LD-DPO: the replies' tails as two more target columns."""
        return micro if self.ld_alpha is None else with_tail_targets(micro)

    def sequence_logps(self, logps: torch.Tensor) -> torch.Tensor:
        """The replies' log-probs (pairs, 2) as the loss reads them: LD-DPO's where ``ld_alpha`` is set."""
        if self.ld_alpha is None:
            return logps[:, :2]
        return length_desensitized(logps[:, :2], logps[:, 2:4], self.ld_alpha)

    def terms(self, logps, lengths, reference, square_sums=None):
        """The weighted sum of the loss types' losses of each pair against the reference's log-probs."""
        chosen, rejected = self.sequence_logps(logps).unbind(1)
        ref_chosen, ref_rejected = (ref.to(chosen.dtype) for ref in reference)
        losses = torch.zeros_like(chosen)
        for name, weight in zip(self.loss_types, self.weights, strict=True):
            if name == "sft":  # the chosen replies' NLL: the step adds it (nll_weight)
                continue
            losses = losses + weight * dpo_loss(
                chosen,
                rejected,
                ref_chosen,
                ref_rejected,
                beta=self.beta,
                loss_type=name,
                label_smoothing=self.label_smoothing,
                chosen_lengths=lengths[:, 0],
                rejected_lengths=lengths[:, 1],
                f_divergence_type=self.f_divergence_type,
                f_alpha_divergence_coef=self.f_alpha_divergence_coef,
                discopop_tau=self.discopop_tau,
            )
        if self.use_weighting:
            if square_sums is None:
                raise ValueError("dpo.use_weighting needs the replies' sums of log Σ p² (pair_scores)")
            aligned = logps[:, :2] - square_sums[:, :2]  # the whole replies' log-probs, not LD-DPO's
            losses = losses * wpo_weights(aligned[:, 0], aligned[:, 1], lengths[:, 0], lengths[:, 1])
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
    known_loss_types: ClassVar[tuple[str, ...]] = CPO_LOSS_TYPES
    reports_nll: ClassVar[bool] = True

    beta: float = 0.1
    loss_type: str = "sigmoid"
    label_smoothing: float = 0.0
    cpo_alpha: float = 1.0
    simpo_gamma: float = 0.5
    alpha: float = 0.0

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
