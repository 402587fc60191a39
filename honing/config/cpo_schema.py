"""CPO's and SimPO's section (``method: cpo``): TRL's CPOTrainer losses, no reference model."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from honing.config.section import Section

SIMPO_GAMMA = 0.5  # TRL's default target margin


class CPOSection(Section):
    """CPO and SimPO (``method: cpo``): preference pairs trained with TRL's CPOTrainer losses, no reference model
    (SimPO: ``loss_type: simpo``, ``cpo_alpha: 0``; AlphaPO: that and ``alpha``). Defaults are TRL's CPOConfig's."""

    loss_type: Literal["sigmoid", "hinge", "ipo", "simpo"] = "sigmoid"
    """The loss (TRL's ``loss_type``): ``sigmoid`` is CPO's; ``ipo`` and ``simpo`` use token-mean log-probs."""
    beta: float = Field(default=0.1, gt=0)
    """The inverse temperature of the preference loss (IPO: the paper's regularisation tau)."""
    label_smoothing: float = Field(default=0.0, ge=0, lt=0.5)
    """``sigmoid`` and ``simpo``: the share of preference labels assumed flipped (a conservative loss)."""
    cpo_alpha: float = Field(default=1.0, ge=0)
    """The weight of the chosen replies' token-mean NLL added to the loss (CPO's behaviour cloning term; 0: none,
    as SimPO)."""
    simpo_gamma: float = SIMPO_GAMMA
    """``simpo`` only: the target reward margin gamma (the loss pushes beta × margin past it)."""
    alpha: float = 0.0
    """AlphaPO's reward shape: r = (1 − P^−alpha) / alpha instead of log P; 0: log P."""
    packed_pairs: bool = True
    """A micro-batch's pairs in one row without padding, attended pair by pair (sdpa / eager attention; not under
    ``parallel.compile``); false: one right-padded row per pair under a dense 4D mask."""

    @field_validator("loss_type", mode="before")
    @classmethod
    def _alphapo_is_spelled_out(cls, value: object) -> object:
        if value == "alphapo":  # TRL rewrites it silently into these keys; here a config says what it runs
            raise ValueError("'alphapo' is TRL's shorthand: write cpo.loss_type: simpo, cpo.cpo_alpha: 0 and cpo.alpha")
        return value

    @model_validator(mode="after")
    def _keys_of_the_loss(self) -> CPOSection:
        if self.label_smoothing and self.loss_type not in ("sigmoid", "simpo"):
            raise ValueError(
                f"cpo.label_smoothing is used by loss_type 'sigmoid' and 'simpo' only (TRL's {self.loss_type!r} "
                "ignores it); remove it"
            )
        if self.simpo_gamma != SIMPO_GAMMA and self.loss_type != "simpo":
            raise ValueError(
                f"cpo.simpo_gamma is used by loss_type 'simpo' only (TRL's {self.loss_type!r} ignores it); "
                "set cpo.loss_type: simpo or remove it"
            )
        return self
