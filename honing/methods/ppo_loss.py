"""PPO's maths as TRL's PPOTrainer computes it (``trl/experimental/ppo/ppo_trainer.py``): per-token rewards (the KL
penalty at every token, the score after the last), GAE advantages and returns, whitening, and the clipped policy and
value losses. Pure functions over a rollout's tensors, each row a completion of ``T`` token positions.

Masks follow TRL's: a row's response is its completion tokens up to and including the stop token
(``completion_mask``); TRL's ``padding_mask`` is its complement, and ``padding_mask_p1`` keeps one position more, the
one after the last token, where the score lands (or on the last token when the completion fills all ``T``). Values
and returns live on that longer span, log-probs and advantages on the response.
"""

from __future__ import annotations

import torch

#: TRL's filler log-prob at padding: equal under the policy and the reference, so the KL there is 0
INVALID_LOGPROB = 1.0


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean of ``values`` where ``mask`` is set."""
    return (values * mask).sum() / mask.sum()


def masked_var(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The unbiased (Bessel-corrected) variance of ``values`` where ``mask`` is set, as TRL's ``masked_var``."""
    mean = masked_mean(values, mask)
    count = mask.sum()
    if count <= 1:  # TRL raises too: one value has no variance
        raise ValueError("whitening needs more than one token; raise the mini-batch or completion length")
    return masked_mean((values - mean) ** 2, mask) * (count / (count - 1))


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """``values`` standardised over the masked positions (the mean kept when not ``shift_mean``)."""
    mean, var = masked_mean(values, mask), masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    return whitened if shift_mean else whitened + mean


def response_masks(completion_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(response, response_p1)``: where each row's response is, and that span one position longer (TRL's
    ``~padding_mask`` and ``~padding_mask_p1``)."""
    index = torch.arange(completion_mask.shape[1], device=completion_mask.device)
    lengths = completion_mask.sum(1, keepdim=True)
    return index < lengths, index <= lengths


def token_kl(logps: torch.Tensor, ref_logps: torch.Tensor, estimator: str) -> torch.Tensor:
    """The per-token KL(policy ‖ reference) estimate of TRL's ``kl_estimator``: ``k1`` log π − log π_ref, ``k3``
    (r − 1) − log r with r = π_ref / π (http://joschu.net/blog/kl-approx.html)."""
    logr = ref_logps - logps
    if estimator == "k1":
        return -logr
    if estimator == "k3":
        return logr.exp() - 1 - logr
    raise ValueError(f"ppo.kl_estimator: expected k1 or k3, got {estimator!r}")


def ppo_rewards(
    scores: torch.Tensor,
    logps: torch.Tensor,
    ref_logps: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    kl_coef: float,
    kl_estimator: str = "k1",
    whiten_rewards: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rewards, kl)`` per token: −``kl_coef`` × the KL at each response token, plus each row's score at the
    position after its last token (TRL's ``actual_end``), whitened over the longer span when ``whiten_rewards``."""
    response, response_p1 = response_masks(completion_mask)
    logps = logps.masked_fill(~response, INVALID_LOGPROB)
    ref_logps = ref_logps.to(logps.dtype).masked_fill(~response, INVALID_LOGPROB)
    kl = token_kl(logps, ref_logps, kl_estimator)
    rewards = -kl_coef * kl
    lengths = completion_mask.sum(1)  # TRL's sequence_lengths_p1
    width = rewards.shape[1]
    end = torch.where(lengths < width, lengths, lengths - 1)
    rewards[torch.arange(len(rewards), device=rewards.device), end] += scores.to(rewards.dtype)
    if whiten_rewards:
        rewards = masked_whiten(rewards, response_p1, shift_mean=False).masked_fill(~response_p1, 0)
    return rewards, kl


def gae(rewards: torch.Tensor, values: torch.Tensor, *, gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over each row's ``T`` positions (the value after the last is 0):
    ``(advantages, returns)``, returns = advantages + values."""
    last = torch.zeros_like(rewards[:, 0])
    reversed_advantages = []
    width = rewards.shape[1]
    for t in reversed(range(width)):
        next_values = values[:, t + 1] if t < width - 1 else 0.0
        delta = rewards[:, t] + gamma * next_values - values[:, t]
        last = delta + gamma * lam * last
        reversed_advantages.append(last)
    advantages = torch.stack(reversed_advantages[::-1], dim=1)
    return advantages, advantages + values


def ppo_advantages(
    rewards: torch.Tensor, values: torch.Tensor, completion_mask: torch.Tensor, *, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(advantages, returns)`` as TRL's rollout makes them: values zero past the longer span, GAE, then the
    advantages whitened over the response tokens (this rank's batch) and zero elsewhere."""
    response, response_p1 = response_masks(completion_mask)
    values = values.masked_fill(~response_p1, 0)
    advantages, returns = gae(rewards, values, gamma=gamma, lam=lam)
    advantages = masked_whiten(advantages, response).masked_fill(~response, 0)
    return advantages, returns


def ppo_policy_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    completion_mask: torch.Tensor,
    cliprange: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(loss, clipfrac, ratio)``: the clipped surrogate max(−A·ρ, −A·clip(ρ, 1 ± ε)) averaged over the response
    tokens, the share of them clipped, and the per-token ratio."""
    response, _ = response_masks(completion_mask)
    logps = logps.masked_fill(~response, INVALID_LOGPROB)
    old_logps = old_logps.to(logps.dtype).masked_fill(~response, INVALID_LOGPROB)
    ratio = torch.exp(logps - old_logps)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    loss = masked_mean(torch.max(unclipped, clipped), response)
    return loss, masked_mean((clipped > unclipped).float(), response), ratio


def ppo_value_loss(
    predicted: torch.Tensor,
    values: torch.Tensor,
    returns: torch.Tensor,
    completion_mask: torch.Tensor,
    cliprange_value: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, clipfrac)``: ½ max((V − R)², (clip(V, V_old ± ε_v) − R)²) averaged over the longer span, and the
    share of it where the clipped term is the larger."""
    _, response_p1 = response_masks(completion_mask)
    predicted = predicted.masked_fill(~response_p1, 0)
    clipped = torch.clamp(predicted, values - cliprange_value, values + cliprange_value)
    unclipped_losses, clipped_losses = (predicted - returns) ** 2, (clipped - returns) ** 2
    loss = 0.5 * masked_mean(torch.max(unclipped_losses, clipped_losses), response_p1)
    return loss, masked_mean((clipped_losses > unclipped_losses).float(), response_p1)
