"""DPO's section (``method: dpo``): TRL's DPO losses against a reference, and the loss types' names."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from honing.config.section import Section

#: TRL's DPO loss types (its DPOConfig's ``loss_type`` names)
DPOLossType = Literal[
    "sigmoid",
    "hinge",
    "ipo",
    "exo_pair",
    "nca_pair",
    "robust",
    "bco_pair",
    "sppo_hard",
    "aot",
    "aot_unpaired",
    "apo_zero",
    "apo_down",
    "discopop",
    "sft",
    "sigmoid_norm",
]
#: the DPO loss types that read ``label_smoothing``
DPO_SMOOTHED_LOSS_TYPES = ("robust", "exo_pair", "aot", "aot_unpaired")
#: the DPO loss types a non-default ``f_divergence_type`` applies to (TRL's list)
DPO_F_DIVERGENCE_LOSS_TYPES = ("sigmoid", "sigmoid_norm", "hinge", "ipo", "exo_pair", "robust", "discopop", "sft")


class DPOSection(Section):
    """DPO (``method: dpo``): preference pairs trained with TRL's DPO losses against a frozen reference
    (``copy``: a frozen copy; ``adapters_off``: the LoRA model with its adapters disabled; ``precompute``: the
    reference's log-probs computed once before training and cached on disk; ``lazy``: computed as batches first need
    them and cached per row). Defaults are TRL's DPOConfig's."""

    loss_type: DPOLossType | list[DPOLossType] = "sigmoid"
    """The DPO loss (TRL's ``loss_type``), or a list of losses summed with ``loss_weights`` (MPO): ``sigmoid`` (the
    paper's), ``hinge`` (SLiC), ``ipo`` and ``sigmoid_norm`` (on token-mean log-ratios), ``exo_pair`` (EXO),
    ``nca_pair``, ``robust`` (rDPO), ``bco_pair``, ``sppo_hard``, ``aot`` / ``aot_unpaired`` (sorted over a
    micro-batch's pairs), ``apo_zero`` / ``apo_down`` (APO), ``discopop``, ``sft`` (the chosen replies' NLL)."""
    loss_weights: list[float] | None = None
    """One weight per ``loss_type`` in the list (TRL's key; MPO); None: 1 each."""
    beta: float = Field(default=0.1, gt=0)
    """How far the policy may move from the reference (the paper's beta; higher: closer to the reference)."""
    label_smoothing: float = Field(default=0.0, ge=0, lt=1)
    """``robust``: the share of preference labels assumed flipped (below 0.5); ``exo_pair``: EXO's epsilon (above 0;
    the paper suggests 1e-3); ``aot`` / ``aot_unpaired``: the smoothing of their sigmoid loss."""
    f_divergence_type: Literal["reverse_kl", "forward_kl", "js_divergence", "alpha_divergence"] = "reverse_kl"
    """f-DPO's divergence between policy and reference (TRL's key): ``reverse_kl`` is DPO's; the others score each
    reply by f'(π/πref) (sigmoid, sigmoid_norm, hinge, ipo, exo_pair, robust, discopop, sft only, as TRL)."""
    f_alpha_divergence_coef: float = 0.5
    """The alpha of ``f_divergence_type: alpha_divergence`` (TRL's key)."""
    ld_alpha: float | None = Field(default=None, ge=0, le=1)
    """LD-DPO (TRL's key): each reply's tokens past the shorter reply's length weigh ``ld_alpha`` in its log-prob
    (policy and reference); 1: plain DPO, 0: the tail ignored; None: off."""
    use_weighting: bool = False
    """WPO (TRL's key): each pair's loss times exp(mean over each reply of log p(token) − log Σ p²), the product over
    its two replies, without gradient; not with sft, aot or aot_unpaired."""
    discopop_tau: float = Field(default=0.05, gt=0)
    """``discopop``'s temperature (TRL's key and default, the paper's)."""
    reference: Literal["copy", "adapters_off", "precompute", "lazy"] = "copy"
    """The reference model: a frozen ``copy``, the LoRA model with its adapters off, log-probs precomputed once for
    the whole split before the first step (``precompute``: no copy held), or ``lazy``: each pair's log-probs scored
    the first time a batch holds it (by a frozen copy, or with the adapters off under LoRA) and cached on disk per
    pair, so the first step starts at once and later epochs and resumed runs read them."""
    rpo_alpha: float | None = Field(default=None, ge=0)
    """Adds ``rpo_alpha`` × the chosen completions' NLL to the loss (RPO; earlier TRL's key, now its ``sft`` loss
    type with that weight); None: not added."""
    packed_pairs: bool = True
    """A micro-batch's pairs in one row without padding, attended pair by pair (sdpa / eager attention; not under
    ``parallel.compile``); false: one right-padded row per pair under a dense 4D mask."""

    @property
    def loss_types(self) -> list[str]:
        """``loss_type`` as a list (one name: a list of one)."""
        return [self.loss_type] if isinstance(self.loss_type, str) else list(self.loss_type)

    @model_validator(mode="after")
    def _loss_settings_apply(self) -> DPOSection:
        types = self.loss_types
        if not types:
            raise ValueError("dpo.loss_type: an empty list; give at least one loss type")
        if self.loss_weights is not None and len(self.loss_weights) != len(types):
            raise ValueError(
                f"dpo.loss_weights: {len(self.loss_weights)} weights for {len(types)} loss types; give one per type"
            )
        smoothed = [name for name in types if name in DPO_SMOOTHED_LOSS_TYPES]
        if self.label_smoothing and not smoothed:
            raise ValueError(
                f"dpo.label_smoothing is used by loss_type {', '.join(DPO_SMOOTHED_LOSS_TYPES)} only (TRL's "
                f"{self.loss_type!r} ignores it); set one of them or remove it"
            )
        if "robust" in types and self.label_smoothing >= 0.5:
            raise ValueError(f"dpo.label_smoothing: robust needs a value below 0.5, got {self.label_smoothing}")
        if "exo_pair" in types and not self.label_smoothing:
            raise ValueError("dpo.label_smoothing: exo_pair needs a value above 0 (EXO's epsilon; the paper: 1e-3)")
        if self.f_divergence_type != "reverse_kl":
            others = [name for name in types if name not in DPO_F_DIVERGENCE_LOSS_TYPES]
            if others:
                raise ValueError(
                    f"dpo.f_divergence_type {self.f_divergence_type!r} does not apply to loss_type {', '.join(others)} "
                    f"(as TRL: only {', '.join(DPO_F_DIVERGENCE_LOSS_TYPES)}); use reverse_kl or another loss type"
                )
        if self.f_alpha_divergence_coef != 0.5 and self.f_divergence_type != "alpha_divergence":
            raise ValueError(
                "dpo.f_alpha_divergence_coef is used by f_divergence_type alpha_divergence only; set it or remove it"
            )
        if self.discopop_tau != 0.05 and "discopop" not in types:
            raise ValueError("dpo.discopop_tau is used by loss_type discopop only; set it or remove it")
        unweighted = [name for name in types if name in ("sft", "aot", "aot_unpaired")]
        if self.use_weighting and unweighted:
            raise ValueError(
                f"dpo.use_weighting: not available with loss_type {', '.join(unweighted)} (aot sorts pairs, so TRL "
                "refuses it; sft is not a pair loss here); remove one"
            )
        return self
