"""PPO's maths equal TRL's PPOTrainer at the same tensors: rewards with the per-token KL penalty (k1, k3, whitened or
not), GAE advantages and returns, and the clipped policy and value losses with their gradients (to 1e-6).

TRL 1.16 ships no PPOTrainer (it left ``trl.experimental.ppo``), and its PPO maths were never functions: they are
lines of ``PPOTrainer.train``. ``trl_ppo`` below reproduces those lines in order, as written in
``trl/experimental/ppo/ppo_trainer.py`` at huggingface/trl commit 0062ee10a9bc59dbb7ba244f3bbaf2e81f25196f (its
``masked_mean`` / ``masked_var`` / ``masked_whiten`` included), on TRL's own padded layout (responses truncated after
the stop token and padded), with the installed TRL's ``first_true_indices`` for the sequence lengths; honing's
functions read the same rollout as a completion mask."""

from __future__ import annotations

import pytest
import torch
from trl.experimental.utils import first_true_indices

from honing.methods.ppo_loss import (
    gae,
    ppo_advantages,
    ppo_policy_loss,
    ppo_rewards,
    ppo_value_loss,
)

PAD, EOS, WIDTH = 0, 2, 7
INVALID_LOGPROB = 1.0


def trl_masked_mean(values, mask):
    return (values * mask).sum() / mask.sum()


def trl_masked_var(values, mask):
    mean = trl_masked_mean(values, mask)
    variance = trl_masked_mean((values - mean) ** 2, mask)
    mask_sum = mask.sum()
    return variance * (mask_sum / (mask_sum - 1))


def trl_masked_whiten(values, mask, shift_mean=True):
    mean, var = trl_masked_mean(values, mask), trl_masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        whitened += mean
    return whitened


def trl_ppo(responses, logprobs, ref_logprobs, values, scores, *, kl_coef, kl_estimator, whiten_rewards, gamma, lam):
    """TRL's PPOTrainer.train from the rollout's tensors to advantages and returns (steps 3-6), line by line."""
    sequence_lengths = first_true_indices(responses == PAD) - 1
    response_idxs = torch.arange(responses.shape[1]).repeat(responses.shape[0], 1)
    padding_mask = response_idxs > sequence_lengths.unsqueeze(1)
    logprobs = torch.masked_fill(logprobs, padding_mask, INVALID_LOGPROB)
    ref_logprobs = torch.masked_fill(ref_logprobs, padding_mask, INVALID_LOGPROB)
    sequence_lengths_p1 = sequence_lengths + 1
    padding_mask_p1 = response_idxs > (sequence_lengths_p1.unsqueeze(1))
    values = torch.masked_fill(values, padding_mask_p1, 0)
    logr = ref_logprobs - logprobs
    kl = -logr if kl_estimator == "k1" else (logr.exp() - 1) - logr
    non_score_reward = -kl_coef * kl
    rewards = non_score_reward.clone()
    actual_start = torch.arange(rewards.size(0))
    actual_end = torch.where(sequence_lengths_p1 < rewards.size(1), sequence_lengths_p1, sequence_lengths)
    rewards[actual_start, actual_end] += scores
    if whiten_rewards:
        rewards = trl_masked_whiten(rewards, mask=~padding_mask_p1, shift_mean=False)
        rewards = torch.masked_fill(rewards, padding_mask_p1, 0)
    lastgaelam = 0
    advantages_reversed = []
    gen_length = responses.shape[1]
    for t in reversed(range(gen_length)):
        nextvalues = values[:, t + 1] if t < gen_length - 1 else 0.0
        delta = rewards[:, t] + gamma * nextvalues - values[:, t]
        lastgaelam = delta + gamma * lam * lastgaelam
        advantages_reversed.append(lastgaelam)
    advantages = torch.stack(advantages_reversed[::-1], axis=1)
    returns = advantages + values
    advantages = trl_masked_whiten(advantages, ~padding_mask)
    advantages = torch.masked_fill(advantages, padding_mask, 0)
    return dict(rewards=rewards, advantages=advantages, returns=returns, values=values, logprobs=logprobs,
                padding_mask=padding_mask, padding_mask_p1=padding_mask_p1)  # fmt: skip


def trl_losses(new_logprobs, vpred, mb, *, cliprange, cliprange_value, vf_coef):
    """TRL's PPOTrainer.train inner step on one micro-batch: the value and policy losses, line by line."""
    new_logprobs = torch.masked_fill(new_logprobs, mb["padding_mask"], INVALID_LOGPROB)
    vpred = torch.masked_fill(vpred, mb["padding_mask_p1"], 0)
    vpredclipped = torch.clamp(vpred, mb["values"] - cliprange_value, mb["values"] + cliprange_value)
    vf_losses1 = torch.square(vpred - mb["returns"])
    vf_losses2 = torch.square(vpredclipped - mb["returns"])
    vf_loss_max = torch.max(vf_losses1, vf_losses2)
    vf_loss = 0.5 * trl_masked_mean(vf_loss_max, ~mb["padding_mask_p1"])
    vf_clipfrac = trl_masked_mean((vf_losses2 > vf_losses1).float(), ~mb["padding_mask_p1"])
    logprobs_diff = new_logprobs - mb["logprobs"]
    ratio = torch.exp(logprobs_diff)
    pg_losses = -mb["advantages"] * ratio
    pg_losses2 = -mb["advantages"] * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    pg_loss_max = torch.max(pg_losses, pg_losses2)
    pg_loss = trl_masked_mean(pg_loss_max, ~mb["padding_mask"])
    pg_clipfrac = trl_masked_mean((pg_losses2 > pg_losses).float(), ~mb["padding_mask"])
    return pg_loss + vf_coef * vf_loss, pg_loss, vf_loss, pg_clipfrac, vf_clipfrac


def rollout(seed=0):
    """Six responses of ``WIDTH`` positions, ending at their EOS then padded (one fills the width without one), with
    the completion mask honing's rollout gives them, and random log-probs, values and scores."""
    generator = torch.Generator().manual_seed(seed)
    lengths = [3, 7, 1, 5, 6, 2]  # the second fills the width: no stop token, its score on its last token
    responses = torch.randint(3, 50, (len(lengths), WIDTH), generator=generator)
    mask = torch.arange(WIDTH)[None] < torch.tensor(lengths)[:, None]
    for row, length in enumerate(lengths):
        if length < WIDTH:
            responses[row, length - 1] = EOS
    responses = responses.masked_fill(~mask, PAD)

    def draw(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    return responses, mask, -draw(6, WIDTH).abs(), -draw(6, WIDTH).abs(), draw(6, WIDTH), draw(6)


@pytest.mark.parametrize(
    "kl_estimator, whiten_rewards, gamma, lam",
    [("k1", False, 1.0, 0.95), ("k3", False, 0.9, 0.8), ("k1", True, 0.99, 0.95), ("k3", True, 1.0, 1.0)],
)
def test_rewards_gae_and_the_losses_equal_trls(kl_estimator, whiten_rewards, gamma, lam):
    responses, mask, logps, ref_logps, values, scores = rollout()
    settings = dict(kl_coef=0.05, kl_estimator=kl_estimator, whiten_rewards=whiten_rewards)
    trl = trl_ppo(responses, logps, ref_logps, values, scores, gamma=gamma, lam=lam, **settings)
    rewards, kl = ppo_rewards(scores, logps, ref_logps, mask, **settings)
    torch.testing.assert_close(rewards, trl["rewards"], atol=1e-6, rtol=0)
    assert (kl[~mask] == 0).all() and (kl[mask] != 0).all()
    advantages, returns = ppo_advantages(rewards, values, mask, gamma=gamma, lam=lam)
    torch.testing.assert_close(advantages, trl["advantages"], atol=1e-6, rtol=0)
    torch.testing.assert_close(returns, trl["returns"], atol=1e-6, rtol=0)

    generator = torch.Generator().manual_seed(1)
    new_logps = (logps + 0.3 * torch.randn(logps.shape, generator=generator, dtype=logps.dtype)).requires_grad_()
    vpred = (values + torch.randn(values.shape, generator=generator, dtype=values.dtype)).requires_grad_()
    clips = dict(cliprange=0.2, cliprange_value=0.2, vf_coef=0.1)
    trl_loss, trl_pg, trl_vf, trl_pg_clip, trl_vf_clip = trl_losses(new_logps, vpred, trl, **clips)
    trl_grads = torch.autograd.grad(trl_loss, (new_logps, vpred))
    pg, pg_clip, _ = ppo_policy_loss(new_logps, logps, advantages, mask, 0.2)
    vf, vf_clip = ppo_value_loss(vpred, trl["values"], returns, mask, 0.2)
    grads = torch.autograd.grad(pg + 0.1 * vf, (new_logps, vpred))
    for ours, theirs in [(pg, trl_pg), (vf, trl_vf), (pg_clip, trl_pg_clip), (vf_clip, trl_vf_clip)]:
        assert abs(ours.item() - theirs.item()) < 1e-6
    assert 0 < pg_clip.item() < 1 and 0 < vf_clip.item() < 1  # both clipping branches taken
    for ours, theirs in zip(grads, trl_grads):
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)


def test_gae_of_one_reward_at_the_end_is_its_discounted_sum_minus_the_value():
    # by hand: with zero values, the advantage at t of a reward r at the last step is (γλ)^(T-1-t) r
    rewards = torch.tensor([[0.0, 0.0, 0.0, 2.0]])
    advantages, returns = gae(rewards, torch.zeros_like(rewards), gamma=0.9, lam=0.5)
    expected = torch.tensor([[2.0 * 0.45**3, 2.0 * 0.45**2, 2.0 * 0.45, 2.0]])
    torch.testing.assert_close(advantages, expected)
    torch.testing.assert_close(returns, expected)
    # λ = 1, γ = 1: the return to go less the value
    values = torch.tensor([[0.5, -1.0, 0.25, 1.0]])
    advantages, returns = gae(rewards, values, gamma=1.0, lam=1.0)
    torch.testing.assert_close(advantages, torch.tensor([[1.5, 3.0, 1.75, 1.0]]))
    torch.testing.assert_close(returns, torch.full((1, 4), 2.0))
