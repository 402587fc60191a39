"""KTO's section (``method: kto``): unpaired completions labelled desirable or undesirable, trained against a
reference with TRL's KTOTrainer losses. Defaults are TRL's KTOConfig's."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from honing.config.section import Section


class KTOSection(Section):
    """KTO (``method: kto``): each row a prompt, one completion and whether it is desirable; the loss raises the
    desirable completions' reward β·(log π − log π_ref) above the KL estimate and the undesirable ones' below it
    (TRL's ``KTOTrainer``). The KL estimate comes from mismatched rows: each prompt scored with another row's
    completion. Paired preference rows become two rows (chosen desirable, rejected undesirable)."""

    loss_type: Literal["kto", "apo_zero_unpaired"] = "kto"
    """The loss (TRL's ``loss_type``): ``kto`` is the paper's (with the KL estimate); ``apo_zero_unpaired`` is APO-zero
    for unpaired rows (no KL estimate: the mismatched completion is cut to one token, scored and unused)."""
    beta: float = Field(default=0.1, gt=0)
    """How far the policy may move from the reference (higher: closer); also scales the logged rewards."""
    desirable_weight: float = Field(default=1.0, gt=0)
    """The desirable rows' losses are multiplied by it (to balance unequal numbers of desirable and undesirable
    rows; the paper keeps desirable_weight × desirable rows / (undesirable_weight × undesirable rows) in [1, 4/3])."""
    undesirable_weight: float = Field(default=1.0, gt=0)
    """The undesirable rows' losses are multiplied by it."""
    reference: Literal["copy", "adapters_off", "precompute", "lazy"] = "copy"
    """The reference model: a frozen ``copy``, the LoRA model with its adapters off, log-probs precomputed once before
    the first step, or scored as batches first need them and cached per row (``lazy``; as ``dpo.reference``)."""
    kl_pairing: Literal["batch", "split"] = "batch"
    """How a row gets the mismatched completion its KL estimate scores: ``batch`` (TRL's) rotates the completions by
    one within each micro-batch (row i takes row i-1's, the first the last's; TRL's ``per_device_train_batch_size``
    batch), so the mismatched completions are the batch's own; ``split`` rotates the rows along a seeded random cycle
    over the whole split once, before training (a row's mismatched completion fixed whatever the loader's order: what
    ``reference: precompute`` and ``lazy`` need)."""
    packed_pairs: bool = True
    """A micro-batch's rows (prompt, completion and mismatched completion) in one row without padding, attended row
    by row (sdpa / eager attention; not under ``parallel.compile``); false: one right-padded row each under a dense
    4D mask."""

    @model_validator(mode="after")
    def _batch_pairing_is_scored_live(self) -> KTOSection:
        if self.loss_type == "kto" and self.kl_pairing == "batch" and self.reference in ("precompute", "lazy"):
            raise ValueError(
                f"kto.reference: {self.reference} scores each row's mismatched completion once, which "
                "kto.kl_pairing: batch changes with every batch; set kto.kl_pairing: split (or kto.reference: copy)"
            )
        return self
