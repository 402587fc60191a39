"""Online DPO's loss on sampled pairs equals TRL 1.16's own ``OnlineDPOTrainer.training_step`` (called unbound on a
stand-in trainer whose generation, forwards and reward functions return fixed tensors), loss and gradient, for both
loss types, with and without ``missing_eos_penalty``, ties included."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from honing.methods.grpo_metrics import ended_rows
from honing.methods.online_dpo_loss import first_is_chosen, online_dpo_terms, pair_rewards

EOS, PAD = 2, 0


def sampled_pairs(pairs: int, width: int, seed: int):
    """TRL's layout (all first completions, then all second): completion ids that end at the first EOS (padded after
    it, as TRL's ``truncate_right``) or run to ``width``, their mask, per-token log-probs and rewards with ties."""
    generator = torch.Generator().manual_seed(seed)
    rows = 2 * pairs
    ids = torch.randint(3, 20, (rows, width), generator=generator)
    lengths = torch.randint(1, width + 1, (rows,), generator=generator)
    stops = torch.rand(rows, generator=generator) < 0.6
    mask = torch.zeros(rows, width, dtype=torch.long)
    for row in range(rows):
        length = int(lengths[row])
        mask[row, :length] = 1
        if stops[row]:
            ids[row, length - 1] = EOS
        ids[row, length:] = PAD if stops[row] else ids[row, length:]
        if not stops[row]:  # no EOS: it ran to the end
            mask[row] = 1
    logps = -torch.rand(rows, width, generator=generator, dtype=torch.float64).float() * 3
    ref_logps = -torch.rand(rows, width, generator=generator, dtype=torch.float64).float() * 3
    rewards = torch.randint(0, 3, (rows,), generator=generator).float()  # small integers: ties happen
    return ids, mask, logps, ref_logps, rewards


def trl_step(ids, mask, logps, ref_logps, rewards, *, beta, loss_type, missing_eos_penalty):
    """TRL's training_step on fixed tensors: its loss, and its gradient with respect to the policy's log-probs."""
    from trl.experimental.online_dpo import OnlineDPOTrainer

    pairs = ids.shape[0] // 2
    policy = logps.clone().requires_grad_(True)
    forwards = iter([policy, ref_logps.clone()])
    trainer = SimpleNamespace(
        args=SimpleNamespace(
            use_vllm=False,
            missing_eos_penalty=missing_eos_penalty,
            loss_type=loss_type,
            torch_empty_cache_steps=None,
            optim="adamw_torch",
            n_gpu=1,
            gradient_accumulation_steps=1,
        ),
        _generate=lambda model, prompts, images: (
            torch.ones(2 * pairs, 3, dtype=torch.long),
            torch.ones(2 * pairs, 3, dtype=torch.long),
            ids,
            mask,
            None,
        ),
        eos_token_ids=[EOS],
        _forward=lambda *args: next(forwards),
        ref_model=object(),
        processing_class=SimpleNamespace(batch_decode=lambda ids, skip_special_tokens: ["x"] * len(ids)),
        _calculate_rewards_from_functions=lambda **kwargs: rewards.clone(),
        reward_funcs=[object()],
        stats=defaultdict(list),
        accelerator=SimpleNamespace(gather_for_metrics=lambda x: x, backward=lambda loss, **kw: loss.backward()),
        beta=beta,
    )
    model = SimpleNamespace(train=lambda: None)
    loss = OnlineDPOTrainer.training_step(trainer, model, {"prompt": [f"p{i}" for i in range(pairs)]})
    return loss, policy.grad


def interleaved(tensor: torch.Tensor) -> torch.Tensor:
    """TRL's rows (firsts, then seconds) as honing's (the two of a prompt side by side)."""
    first, second = tensor.chunk(2)
    return torch.stack([first, second], dim=1).reshape(tensor.shape)


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo"])
@pytest.mark.parametrize("missing_eos_penalty", [None, 1.5])
def test_the_loss_and_gradient_equal_trls_training_step(loss_type, missing_eos_penalty):
    pytest.importorskip("trl")
    ids, mask, logps, ref_logps, rewards = sampled_pairs(pairs=6, width=7, seed=3)
    beta = 0.1
    trl_loss, trl_grad = trl_step(
        ids, mask, logps, ref_logps, rewards, beta=beta, loss_type=loss_type, missing_eos_penalty=missing_eos_penalty
    )

    ids_h, mask_h, ref_h = interleaved(ids), interleaved(mask), interleaved(ref_logps)
    policy = interleaved(logps).clone().requires_grad_(True)
    ended = ended_rows(ids_h, mask_h, [EOS])
    assert torch.equal(ended, torch.isin(ids_h, torch.tensor([EOS])).any(1))  # TRL's contain_eos_token
    penalised = pair_rewards(interleaved(rewards).unsqueeze(1), torch.ones(1), ended, missing_eos_penalty)
    first = first_is_chosen(penalised)
    terms = online_dpo_terms(policy, ref_h, mask_h, first, beta=beta, loss_type=loss_type)
    loss = terms.losses.mean()
    loss.backward()

    assert first.any() and (~first).any()  # both orders occur
    assert torch.isclose(loss, trl_loss, atol=1e-6, rtol=0), (loss.item(), trl_loss.item())
    assert torch.allclose(policy.grad, interleaved(trl_grad), atol=1e-6, rtol=0)


def test_a_tie_chooses_the_first_and_the_penalty_can_flip_a_pair():
    rewards = torch.tensor([[1.0], [1.0], [2.0], [1.5]])
    ended = torch.tensor([True, True, False, True])
    assert first_is_chosen(pair_rewards(rewards, torch.ones(1), ended, None)).tolist() == [True, True]
    assert first_is_chosen(pair_rewards(rewards, torch.ones(1), ended, 1.0)).tolist() == [True, False]
    none_applies = torch.tensor([[float("nan")], [0.5]])  # a reward's None counts 0 in TRL's nansum
    assert pair_rewards(none_applies, torch.ones(1), ended[:2], None).tolist() == [0.0, 0.5]
