"""Loss functions as pure functions, tested against hand-computed numbers."""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


def next_token_targets(labels: torch.Tensor) -> torch.Tensor:
    """Labels shifted left by one: position t is trained to predict token t+1; the last has no target."""
    return F.pad(labels[..., 1:], (0, 1), value=IGNORE_INDEX)


def count_target_tokens(labels: torch.Tensor) -> torch.Tensor:
    """How many positions of ``labels`` (unshifted) carry a next-token loss."""
    return (labels[..., 1:] != IGNORE_INDEX).sum()


def batch_targets(batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """A (micro-)batch's next-token targets: its ``targets`` where they were shifted on whole rows already (rows
    split over sequence-parallel ranks, ``honing.methods.sequence_split``), else its ``labels`` shifted."""
    targets = batch.get("targets")
    return targets if targets is not None else next_token_targets(batch["labels"])


def cross_entropy_sum(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Summed next-token cross-entropy over the positions that have a target.

    Summing (not averaging) lets the caller divide by the token count of the whole optimizer
    step, so the update does not depend on how the batch is split into micro-batches.
    """
    return targets_cross_entropy_sum(logits, next_token_targets(labels))


def targets_cross_entropy_sum(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Summed cross-entropy of ``logits`` against already shifted ``targets`` (position t's target is token t+1)."""
    flat = logits.reshape(-1, logits.size(-1)).float()
    return F.cross_entropy(flat, targets.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum")


def count_correct(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """How many next-token targets the argmax of ``logits`` predicts exactly (token accuracy)."""
    return count_correct_targets(logits, next_token_targets(labels))


def count_correct_targets(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """How many of the already shifted ``targets`` the argmax of ``logits`` predicts exactly."""
    return ((logits.argmax(-1) == targets) & (targets != IGNORE_INDEX)).sum()


# --- GRPO (group-relative policy optimisation), TRL's definitions (trl/trainer/grpo_trainer.py) ---------------

GRPO_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
#: the loss types whose ratio is clipped PPO's way, −min(ratio·A, clip(ratio)·A) (the others: ``grpo_soft_losses``)
CLIPPED_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")
SCALE_REWARDS = ("group", "batch", "none")
#: the per-token estimates of KL(policy ‖ reference) from sampled tokens (Schulman, http://joschu.net/blog/kl-approx.html)
KL_ESTIMATORS = ("k1", "abs", "k2", "k3", "low_var_kl")
#: TRL's ``importance_sampling_level``: a ratio per token (GRPO's), per completion (GSPO's) or GSPO-token's
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence", "sequence_token")


def kl_estimate(logps: torch.Tensor, ref_logps: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(policy ‖ reference) from the sampled tokens' log-probs: ``k1`` log π − log π_ref
    (unbiased, can be negative), ``abs`` its magnitude, ``k2`` ½(log π − log π_ref)², ``k3`` π_ref/π − log(π_ref/π)
    − 1 (unbiased, never negative: TRL's GRPO term), ``low_var_kl`` k3 as verl computes it, the log-ratio clamped to
    [−20, 20] and the estimate to [−10, 10]. The names and formulas are verl's ``kl_penalty_forward``
    (https://github.com/volcengine/verl/blob/main/verl/trainer/ppo/core_algos.py), which spells k1 ``kl`` and k2
    ``mse`` too."""
    if estimator == "k3":  # TRL's expression, term for term, so the default's bits never change
        return torch.exp(ref_logps - logps) - (ref_logps - logps) - 1
    if estimator == "k1":
        return logps - ref_logps
    if estimator == "abs":
        return (logps - ref_logps).abs()
    if estimator == "k2":
        return 0.5 * (logps - ref_logps).square()
    if estimator == "low_var_kl":
        log_ratio = torch.clamp(ref_logps - logps, min=-20, max=20)  # verl's clamps, for numerical stability
        return torch.clamp(torch.exp(log_ratio) - log_ratio - 1, min=-10, max=10)
    raise ValueError(f"kl estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")


def token_logps(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Log-probability of each of ``tokens`` under ``logits / temperature`` (the same positions, already aligned):
    TRL scores completions at the sampling temperature."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    return torch.gather(logits.log_softmax(-1), -1, tokens.unsqueeze(-1)).squeeze(-1)


def nanstd(values: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """The Bessel-corrected standard deviation ignoring NaNs (TRL's ``nanstd``)."""
    mean = torch.nanmean(values, dim=dim, keepdim=True)
    variance = torch.nanmean((values - mean) ** 2, dim=dim, keepdim=True)
    count = torch.sum(~torch.isnan(values), dim=dim, keepdim=True)
    variance = variance * count / (count - 1)
    return torch.sqrt(variance).squeeze() if dim is None else torch.sqrt(variance).squeeze(dim)


def combine_rewards(rewards_per_func: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Each completion's reward: the weighted sum over reward functions, a function's NaN (``None``: not
    applicable) counting as 0, and NaN when no function applies (TRL: such a completion gets no advantage)."""
    rewards = (rewards_per_func * weights.to(rewards_per_func).unsqueeze(0)).nansum(dim=1)
    return rewards.masked_fill(torch.isnan(rewards_per_func).all(dim=1), float("nan"))


def normalized_reward_sum(rewards_per_func: torch.Tensor, weights: torch.Tensor, num_generations: int) -> torch.Tensor:
    """GDPO's ``normalize_then_sum`` (TRL's ``multi_objective_aggregation``): each reward function's rewards
    standardised within its group (nan-aware mean, Bessel std + 1e-4), then their weighted sum; NaN where no function
    applies. The advantages then standardise these over the whole batch."""
    functions = rewards_per_func.shape[1]
    grouped = rewards_per_func.view(-1, num_generations, functions)
    mean = torch.nanmean(grouped, dim=1, keepdim=True)
    std = nanstd(grouped, dim=1).unsqueeze(1) if num_generations > 1 else torch.zeros_like(mean)
    normalized = ((grouped - mean) / (std + 1e-4)).view(-1, functions)
    rewards = (normalized * weights.to(normalized).unsqueeze(0)).nansum(dim=1)
    return rewards.masked_fill(torch.isnan(rewards_per_func).all(dim=1), float("nan"))


def group_advantages(
    rewards: torch.Tensor, num_generations: int, scale_rewards: str = "group"
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(advantages, std)`` for rewards laid out as consecutive groups of ``num_generations`` completions per
    prompt: A = r − mean_group(r), divided by (the group's, or the batch's, Bessel-corrected std + 1e-4) unless
    ``scale_rewards`` is ``none``; ``std`` is what the scaling used (the group's for ``none``, for the
    zero-std metric). NaN rewards are left out of the means and get advantage 0."""
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards must be one of {SCALE_REWARDS}, got {scale_rewards!r}")
    grouped = rewards.view(-1, num_generations)
    mean = torch.nanmean(grouped, dim=1).repeat_interleave(num_generations)
    if scale_rewards == "batch":
        std = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
    elif num_generations > 1:
        std = nanstd(grouped, dim=1).repeat_interleave(num_generations)
    else:
        std = torch.zeros_like(rewards)
    advantages = rewards - mean
    if scale_rewards != "none":
        advantages = advantages / (std + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0), std


def sequence_log_ratio(logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each completion's mean per-token log-ratio (GSPO's length-normalised log importance weight), ``(B,)``."""
    mask = mask.to(logps.dtype)
    return ((logps - old_logps) * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)


def importance_log_weights(
    logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor | None, level: str = "token"
) -> torch.Tensor:
    """The log importance weight of each token at ``level``: ``token`` its own log-ratio log π − log π_old; GSPO's
    ``sequence`` each completion's mean log-ratio over ``mask``, ``(B, 1)``; ``sequence_token`` that value on every
    token with each token's own gradient (log sg[s_i] + log π − sg[log π])."""
    if level == "token":
        return logps - old_logps
    if level not in IMPORTANCE_SAMPLING_LEVELS:
        raise ValueError(f"importance_sampling_level must be one of {IMPORTANCE_SAMPLING_LEVELS}, got {level!r}")
    log_weights = sequence_log_ratio(logps, old_logps, mask).unsqueeze(-1)
    if level == "sequence_token":
        log_weights = log_weights.detach() + logps - logps.detach()
    return log_weights


def grpo_per_token_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    level: str = "token",
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    ref_logps: torch.Tensor | None = None,
    beta: float = 0.0,
    kl_estimator: str = "k3",
    use_bias_correction_kl: bool = True,
    delta: float | None = None,
    policy_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``(per-token loss, ratio, per-token KL)``: −min(ratio·A, clip(ratio, 1−ε, 1+ε_high)·A) with ratio =
    exp(logp − old_logp), plus β times an estimate of KL(policy ‖ reference) (``kl_estimate``; TRL's is k3).
    ``delta``: the unclipped ratio also capped at delta (INTELLECT-2's two-sided clipping; the returned ratio is the
    capped one, as TRL's clip metrics read it); ``policy_mask``: multiplies the policy term, not the KL (TRL's
    ``top_entropy_quantile`` mask).

    ``level`` is TRL's ``importance_sampling_level`` (``importance_log_weights``): ``token`` a ratio per token; GSPO's
    ``sequence`` one ratio per completion of the tokens of ``mask``, exp(mean log-ratio), clipped as a whole (shapes
    ``(B, 1)``, as TRL's); ``sequence_token`` GSPO-token, that value on every token with each token's own gradient.

    As TRL does (``use_bias_correction_kl``, its default), the KL term is multiplied by the ratio, not detached:
    its gradient is then the unbiased reverse-KL gradient, and it differs from the plain k3 gradient even
    on-policy, where the ratio's value is exactly 1. ``use_bias_correction_kl=False``: the estimate alone (verl's
    ``use_kl_loss``).
    """
    epsilon_high = epsilon if epsilon_high is None else epsilon_high
    advantages = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
    ratio = torch.exp(importance_log_weights(logps, old_logps, mask, level))
    loss, capped = clipped_policy_loss(ratio, advantages, epsilon, epsilon_high, delta)
    kl = kl_term(logps, ref_logps, ratio, beta, kl_estimator, use_bias_correction_kl)
    return with_kl(loss, kl, beta, policy_mask), capped, kl


def clipped_policy_loss(
    ratio: torch.Tensor, advantages: torch.Tensor, epsilon: float, epsilon_high: float, delta: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(−min(ratio·A, clip(ratio, 1−ε, 1+ε_high)·A), the ratio as used)``: PPO's clipped surrogate, the unclipped
    ratio capped at ``delta`` when given (TRL's two-sided clipping, after the clipped copy is taken)."""
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon_high)
    if delta is not None:
        ratio = torch.clamp(ratio, max=delta)
    return -torch.min(ratio * advantages, clipped * advantages), ratio


def kl_term(
    logps: torch.Tensor,
    ref_logps: torch.Tensor | None,
    ratio: torch.Tensor,
    beta: float,
    kl_estimator: str = "k3",
    use_bias_correction_kl: bool = True,
) -> torch.Tensor | None:
    """The per-token KL estimate of the loss (None when ``beta`` is 0), times the probability ratio (not detached)
    under ``use_bias_correction_kl``, as TRL's GRPOTrainer."""
    if beta == 0.0:
        return None
    if ref_logps is None:
        raise ValueError("beta != 0 needs the reference model's log-probabilities")
    kl = kl_estimate(logps, ref_logps, kl_estimator)
    return kl * ratio if use_bias_correction_kl else kl


def with_kl(
    policy_loss: torch.Tensor, kl: torch.Tensor | None, beta: float, policy_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """The per-token loss: the policy term (times ``policy_mask`` when given) plus beta × the KL term, in TRL's
    order."""
    if policy_mask is not None:
        policy_loss = policy_loss * policy_mask
    return policy_loss if kl is None else policy_loss + beta * kl


def grpo_loss_sum(per_token_loss: torch.Tensor, mask: torch.Tensor, loss_type: str) -> torch.Tensor:
    """A micro-batch's share of the GRPO loss before its normaliser (``grpo_loss_scale``): the sum of the
    per-sequence token means for ``grpo`` and ``sapo``, the token mean for ``bnpo`` (TRL normalises it per
    micro-batch), and the token sum for ``dr_grpo``, ``dapo``, ``cispo``, ``vespo`` and ``luspo`` (LUSPO: each
    sequence's sum, its loss times its length, averaged over sequences by the scale)."""
    mask = mask.to(per_token_loss.dtype)
    if loss_type in ("grpo", "sapo"):
        return ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).sum()
    if loss_type == "bnpo":
        return (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)
    if loss_type in ("dr_grpo", "dapo", "cispo", "vespo", "luspo"):
        return (per_token_loss * mask).sum()
    raise ValueError(f"loss_type must be one of {GRPO_LOSS_TYPES}, got {loss_type!r}")


def grpo_loss_scale(
    loss_type: str,
    *,
    sequences: int,
    tokens: int | torch.Tensor,
    micro_batches: int,
    max_completion_length: int,
    world_size: int = 1,
) -> float | torch.Tensor:
    """What this rank multiplies its summed ``grpo_loss_sum`` values by, given the step's completions and
    completion tokens over every rank and this rank's micro-batches: TRL's normalisation, its gradient
    accumulation steps being the micro-batches (``grpo``, ``sapo``, ``luspo``: mean over sequences; ``bnpo``: mean
    over micro-batches and ranks of their token means; ``dr_grpo``: over completions × max_completion_length;
    ``dapo``, ``cispo``, ``vespo``: over tokens). Times the world size where the count is global, because gradients
    are averaged over ranks."""
    if loss_type in ("grpo", "sapo", "luspo"):
        return world_size / sequences
    if loss_type == "bnpo":
        return 1.0 / micro_batches
    if loss_type == "dr_grpo":
        return world_size / (sequences * max_completion_length)
    if loss_type in ("dapo", "cispo", "vespo"):
        return world_size / (tokens.clamp(min=1) if isinstance(tokens, torch.Tensor) else max(tokens, 1))
    raise ValueError(f"loss_type must be one of {GRPO_LOSS_TYPES}, got {loss_type!r}")


# --- preference pairs: each completion's summed log-prob (DPO's losses: honing.dpo_losses) ---------------------


def completion_logps(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(sum of log-probs, count)`` of each row's completions, shape ``(rows, K)``: ``targets`` (rows, length, K)
    holds, at each position, the token its logits predict for each of K completions (``IGNORE_INDEX`` where none),
    so that completions sharing a prompt (DPO's chosen and rejected in one row) are scored from one forward."""
    logits = logits.float()
    mask = targets != IGNORE_INDEX
    picked = logits.gather(-1, targets.clamp(min=0))  # (rows, length, K)
    logps = (picked - logits.logsumexp(-1, keepdim=True)).masked_fill(~mask, 0.0)
    return logps.sum(1), mask.sum(1)


# --- reference-free preference losses: ORPO and CPO / SimPO, TRL's definitions (trl/experimental/orpo, cpo) ------

CPO_LOSS_TYPES = ("sigmoid", "hinge", "ipo", "simpo")


def log1mexp(x: torch.Tensor) -> torch.Tensor:
    """log(1 − exp(x)) for x ≤ 0, without cancellation on either side of −ln 2 (TRL's ``log1mexp``)."""
    return torch.where(x < -0.6931471805599453, torch.log1p(-torch.exp(x)), torch.log(-torch.expm1(x)))


def orpo_log_odds(chosen_logps: torch.Tensor, rejected_logps: torch.Tensor) -> torch.Tensor:
    """Each pair's log odds ratio, log odds(y+) − log odds(y−) with odds(y) = P(y) / (1 − P(y)), from token-mean
    log-probs (ORPO's P(y) is the geometric mean of the token probabilities, eqs. 4 and 7 of the paper)."""
    return (chosen_logps - rejected_logps) - (log1mexp(chosen_logps) - log1mexp(rejected_logps))


def orpo_loss(
    chosen_logps: torch.Tensor, rejected_logps: torch.Tensor, *, beta: float = 0.1
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(per-pair loss, log odds ratio)``: the odds-ratio term −β·log σ(log odds ratio) of ORPO, whose whole loss
    adds the chosen sequences' NLL (β is the paper's λ; TRL's ``beta``)."""
    log_odds = orpo_log_odds(chosen_logps, rejected_logps)
    return -beta * F.logsigmoid(log_odds), log_odds


def cpo_rewards(logps: torch.Tensor, alpha: float = 0.0) -> torch.Tensor:
    """The implicit reward of a completion before β: its log-prob, or AlphaPO's (1 − P^−α) / α for α ≠ 0
    (computed as −expm1(−α·logp) / α, which a sum of many log-probs cannot underflow)."""
    return logps if alpha == 0.0 else -torch.expm1(-alpha * logps) / alpha


def cpo_loss(
    chosen_logps: torch.Tensor,
    rejected_logps: torch.Tensor,
    *,
    beta: float = 0.1,
    loss_type: str = "sigmoid",
    label_smoothing: float = 0.0,
    simpo_gamma: float = 0.5,
    alpha: float = 0.0,
) -> torch.Tensor:
    """Each pair's loss (not reduced) from the policy's log-probs alone, no reference: with z = r(y+) − r(y−)
    (``cpo_rewards``), ``sigmoid`` −(1−ε)·logσ(βz) − ε·logσ(−βz) (CPO; ε = ``label_smoothing``), ``hinge``
    relu(1 − βz), ``ipo`` (z − 1/(2β))², and ``simpo`` the sigmoid loss of z − γ/β (SimPO's target margin γ =
    ``simpo_gamma``). ``ipo`` and ``simpo`` take token-mean log-probs, the others summed ones (the caller's)."""
    z = cpo_rewards(chosen_logps, alpha) - cpo_rewards(rejected_logps, alpha)
    if loss_type == "simpo":
        z = z - simpo_gamma / beta
    if loss_type in ("sigmoid", "simpo"):
        return -F.logsigmoid(beta * z) * (1 - label_smoothing) - F.logsigmoid(-beta * z) * label_smoothing
    if loss_type == "hinge":
        return torch.relu(1 - beta * z)
    if loss_type == "ipo":
        return (z - 1 / (2 * beta)) ** 2
    raise ValueError(f"loss_type must be one of {CPO_LOSS_TYPES}, got {loss_type!r}")
