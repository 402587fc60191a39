"""DPO's losses as pure functions, TRL's definitions (trl/trainer/dpo_trainer.py, ``_compute_loss``), every loss type
its DPOTrainer lists, the f-divergences of f-DPO, and WPO's pair weights."""

from __future__ import annotations

import math
from typing import get_args

import torch
import torch.nn.functional as F

from honing.config.dpo_schema import DPO_F_DIVERGENCE_LOSS_TYPES, DPOLossType

#: TRL's DPOConfig ``loss_type`` names, in its order (the dpo section's); ``sft`` is the chosen replies' token-mean NLL
#: (not per pair)
DPO_LOSS_TYPES = get_args(DPOLossType)
#: f-DPO's divergences between the policy and the reference (TRL's ``f_divergence_type``)
F_DIVERGENCES = ("reverse_kl", "forward_kl", "js_divergence", "alpha_divergence")
#: the loss types built on the chosen − rejected score difference, where the f-DPO reparameterisation's β·log Z(x)
#: cancels; TRL refuses another divergence with the others
F_DIVERGENCE_LOSS_TYPES = DPO_F_DIVERGENCE_LOSS_TYPES
#: the loss types that sort a micro-batch's pairs (their per-pair values are not each pair's own)
SORTING_LOSS_TYPES = ("aot", "aot_unpaired")


def f_divergence_scores(logratios: torch.Tensor, f_divergence_type: str, alpha: float = 0.5) -> torch.Tensor:
    """f'(π/πref) of each completion from its log-ratio log π − log πref (f-DPO): ``reverse_kl`` the log-ratio itself
    (DPO), ``forward_kl`` 1 − 1/t, ``js_divergence`` log 2t/(t+1), ``alpha_divergence`` (t^(α−1) − 1)/(α − 1)
    (the log-ratio at α = 1, and the exponent clamped as TRL does so that exp stays finite in the dtype)."""
    if f_divergence_type == "reverse_kl":
        return logratios
    if f_divergence_type == "forward_kl":
        return 1 - torch.exp(-logratios)
    if f_divergence_type == "js_divergence":
        return math.log(2) + F.logsigmoid(logratios)
    if f_divergence_type == "alpha_divergence":
        if abs(alpha - 1.0) < 1e-6:  # the limit α → 1 is log t
            return logratios
        exponent = (alpha - 1.0) * logratios
        clamp_max = {torch.float16: 11.0, torch.bfloat16: 80.0}.get(exponent.dtype, 80.0)
        return (torch.exp(torch.clamp(exponent.float(), max=clamp_max)) - 1.0).to(exponent.dtype) / (alpha - 1.0)
    raise ValueError(f"f_divergence_type must be one of {F_DIVERGENCES}, got {f_divergence_type!r}")


def dpo_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    *,
    beta: float = 0.1,
    loss_type: str = "sigmoid",
    label_smoothing: float = 0.0,
    chosen_lengths: torch.Tensor | None = None,
    rejected_lengths: torch.Tensor | None = None,
    f_divergence_type: str = "reverse_kl",
    f_alpha_divergence_coef: float = 0.5,
    discopop_tau: float = 0.05,
) -> torch.Tensor:
    """The loss of each pair (not reduced) of one loss type from sequence log-probs of the policy and the reference.

    With log-ratios c = logπ(y+) − logπref(y+), r = logπ(y−) − logπref(y−), scores s± = f'(exp(c or r))
    (``f_divergence_scores``; the log-ratios under ``reverse_kl``) and Δ = s+ − s−: ``sigmoid`` −logσ(βΔ) (DPO);
    ``hinge`` relu(1 − βΔ) (SLiC); ``ipo`` (Δ' − 1/(2β))², Δ' from scores divided by the completions' token counts
    (as the IPO authors confirmed to TRL); ``exo_pair`` KL(softmax over the pair ‖ (1−ε, ε)) (EXO);
    ``nca_pair`` −logσ(βc) − ½logσ(−βc) − ½logσ(−βr) (NCA); ``robust`` [−(1−ε)logσ(βΔ) + ε·logσ(−βΔ)]/(1−2ε)
    (rDPO); ``bco_pair`` −logσ(βc) − logσ(−βr); ``sppo_hard`` (c − 1/(2β))² + (r + 1/(2β))² (SPPO, hard
    probabilities); ``aot`` / ``aot_unpaired`` the smoothed sigmoid loss of sorted log-ratio differences
    (AOT: the pairs' values are the sorted order's, not each pair's own); ``apo_zero`` 1 − σ(βc) + σ(βr) and
    ``apo_down`` σ(βc) + 1 − σ(β(c − r)) (APO); ``discopop`` the log-ratio modulated blend of −logσ(βΔ) and
    exp(−βΔ) (DiscoPOP, τ = ``discopop_tau``); ``sigmoid_norm`` −logσ(βΔ') with Δ' as ``ipo``'s. ε is
    ``label_smoothing``. ``sft`` is not a pair loss: the caller adds the chosen replies' token-mean NLL.
    """
    chosen_logratios, rejected_logratios = policy_chosen - ref_chosen, policy_rejected - ref_rejected
    if f_divergence_type != "reverse_kl" and loss_type not in F_DIVERGENCE_LOSS_TYPES:
        raise ValueError(f"f_divergence_type {f_divergence_type!r} works with {F_DIVERGENCE_LOSS_TYPES} only")
    chosen_scores = f_divergence_scores(chosen_logratios, f_divergence_type, f_alpha_divergence_coef)
    rejected_scores = f_divergence_scores(rejected_logratios, f_divergence_type, f_alpha_divergence_coef)
    delta = chosen_scores - rejected_scores
    if loss_type == "sigmoid":
        return -F.logsigmoid(beta * delta)
    if loss_type == "hinge":
        return torch.relu(1 - beta * delta)
    if loss_type in ("ipo", "sigmoid_norm"):
        if chosen_lengths is None or rejected_lengths is None:
            raise ValueError(
                f"the {loss_type} loss needs chosen_lengths and rejected_lengths (completion token counts)"
            )
        normalised = chosen_scores / chosen_lengths.clamp(min=1) - rejected_scores / rejected_lengths.clamp(min=1)
        return (normalised - 1 / (2 * beta)) ** 2 if loss_type == "ipo" else -F.logsigmoid(beta * normalised)
    if loss_type == "exo_pair":
        if not 0.0 < label_smoothing < 1.0:
            raise ValueError(
                f"the exo_pair loss needs 0 < label_smoothing < 1 (EXO suggests 1e-3), got {label_smoothing}"
            )
        chosen_share, rejected_share = torch.sigmoid(beta * delta), torch.sigmoid(-beta * delta)
        return chosen_share * (F.logsigmoid(beta * delta) - math.log1p(-label_smoothing)) + rejected_share * (
            F.logsigmoid(-beta * delta) - math.log(label_smoothing)
        )
    if loss_type == "nca_pair":
        chosen_rewards, rejected_rewards = beta * chosen_logratios, beta * rejected_logratios
        return (
            -F.logsigmoid(chosen_rewards) - 0.5 * F.logsigmoid(-chosen_rewards) - 0.5 * F.logsigmoid(-rejected_rewards)
        )
    if loss_type == "robust":
        if not 0.0 <= label_smoothing < 0.5:
            raise ValueError(f"the robust loss needs 0 <= label_smoothing < 0.5, got {label_smoothing}")
        clean = -(1 - label_smoothing) * F.logsigmoid(beta * delta)
        flipped = -label_smoothing * F.logsigmoid(-beta * delta)
        return (clean - flipped) / (1 - 2 * label_smoothing)
    if loss_type == "bco_pair":
        return -F.logsigmoid(beta * chosen_logratios) - F.logsigmoid(-beta * rejected_logratios)
    if loss_type == "sppo_hard":  # SPPO's P(y+ ≻ y−) set to 1 for the winner and 0 for the loser
        return (chosen_logratios - 0.5 / beta) ** 2 + (rejected_logratios + 0.5 / beta) ** 2
    if loss_type in SORTING_LOSS_TYPES:
        if loss_type == "aot":
            policy_sorted = torch.sort(policy_chosen - policy_rejected, dim=0)[0]
            sorted_delta = policy_sorted - torch.sort(ref_chosen - ref_rejected, dim=0)[0]
        else:
            sorted_delta = torch.sort(chosen_logratios, dim=0)[0] - torch.sort(rejected_logratios, dim=0)[0]
        return (
            -F.logsigmoid(beta * sorted_delta) * (1 - label_smoothing)
            - F.logsigmoid(-beta * sorted_delta) * label_smoothing
        )
    if loss_type == "apo_zero":  # eq. 7 of APO: the chosen replies are better than the model's own
        return (1 - torch.sigmoid(beta * chosen_logratios)) + torch.sigmoid(beta * rejected_logratios)
    if loss_type == "apo_down":  # eq. 8: the chosen replies are worse than the model's own
        return torch.sigmoid(beta * chosen_logratios) + (
            1 - torch.sigmoid(beta * (chosen_logratios - rejected_logratios))
        )
    if loss_type == "discopop":  # eq. 5 of DiscoPOP
        logits = delta * beta
        modulation = torch.sigmoid(logits / discopop_tau)
        return -F.logsigmoid(logits) * (1 - modulation) + torch.exp(-logits) * modulation
    if loss_type == "sft":
        raise ValueError("the sft loss is the chosen replies' token-mean NLL, not a pair loss; the caller adds it")
    raise ValueError(f"loss_type must be one of {DPO_LOSS_TYPES}, got {loss_type!r}")


def wpo_weights(
    chosen_aligned: torch.Tensor,
    rejected_aligned: torch.Tensor,
    chosen_lengths: torch.Tensor,
    rejected_lengths: torch.Tensor,
) -> torch.Tensor:
    """Each pair's WPO weight (eq. 2 of the WPO paper, TRL's ``use_weighting``), detached: the product over its two
    replies of exp(the token mean of log p(token) − log Σ_v p(v)²), from each reply's sum of those per-token values
    (``aligned``) and its token count."""
    chosen = torch.exp(chosen_aligned.detach() / chosen_lengths.clamp(min=1))
    rejected = torch.exp(rejected_aligned.detach() / rejected_lengths.clamp(min=1))
    return chosen * rejected
