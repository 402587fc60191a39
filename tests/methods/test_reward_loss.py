"""The reward model's loss and rewards: TRL's RewardTrainer.compute_loss on the same rewards (margins and
center_rewards_coefficient included) within 1e-6, and each sequence scored where transformers' sequence classifier
scores it alone."""

from __future__ import annotations

import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForSequenceClassification, LlamaConfig

from honing.data.preference.batches import PairCollator
from honing.data.preference.reward_rows import MarginPairCollator
from honing.methods.reward import pair_rewards, sequence_ends
from honing.methods.reward_loss import RewardLoss, reward_loss
from honing.models.pair_attention import enable_pair_attention

trl_reward = pytest.importorskip("trl.trainer.reward_trainer")

PAD = 0


def trl_loss(chosen: torch.Tensor, rejected: torch.Tensor, margins, coefficient) -> torch.Tensor:
    """TRL's own RewardTrainer.compute_loss on a model whose logits are these rewards (chosen rows, then rejected)."""
    trainer = SimpleNamespace(
        model=SimpleNamespace(training=False),  # eval mode: no token count gathered
        args=SimpleNamespace(center_rewards_coefficient=coefficient),
        accelerator=SimpleNamespace(gather=lambda x: x, gather_for_metrics=lambda x: x),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        _total_train_tokens=0,
    )
    logits = torch.cat([chosen, rejected])[:, None]
    inputs = {} if margins is None else {"margin": margins}
    model = lambda **_: SimpleNamespace(logits=logits)  # noqa: E731
    loss = trl_reward.RewardTrainer.compute_loss(trainer, model, inputs)
    return loss, trainer._metrics["eval"]


@pytest.mark.parametrize("with_margin", [False, True])
@pytest.mark.parametrize("coefficient", [None, 0.01, 0.5])
def test_the_mean_loss_equals_trls(with_margin, coefficient):
    generator = torch.Generator().manual_seed(3)
    chosen, rejected = torch.randn(16, generator=generator) * 3, torch.randn(16, generator=generator) * 3
    margins = torch.rand(16, generator=generator) * 2 if with_margin else None
    expected, trl_metrics = trl_loss(chosen, rejected, margins, coefficient)
    terms = RewardLoss(center_rewards_coefficient=coefficient).terms(
        torch.stack([chosen, rejected], 1), None, None, margins=margins
    )
    assert terms["losses"].shape == (16,)
    assert terms["losses"].mean().item() == pytest.approx(expected.item(), abs=1e-6)
    # TRL's accuracy and margin are the means of the rewards the part returns
    accuracy = (terms["chosen_rewards"] > terms["rejected_rewards"]).float().mean().item()
    assert accuracy == pytest.approx(trl_metrics["accuracy"][0], abs=1e-7)
    margin = (terms["chosen_rewards"] - terms["rejected_rewards"]).mean().item()
    assert margin == pytest.approx(trl_metrics["margin"][0], abs=1e-6)


def test_equal_rewards_cost_log_2_and_the_margin_shifts_the_difference():
    zero = torch.zeros(3)
    assert reward_loss(zero, zero).tolist() == pytest.approx([math.log(2)] * 3)
    losses = reward_loss(torch.tensor([2.0]), torch.tensor([0.5]), margins=torch.tensor([1.5]))
    assert losses.item() == pytest.approx(math.log(2))
    centred = reward_loss(torch.tensor([1.0]), torch.tensor([1.0]), center_rewards_coefficient=0.1)
    assert centred.item() == pytest.approx(math.log(2) + 0.1 * 4)


def tiny_classifier() -> torch.nn.Module:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=40,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=64,
        pad_token_id=PAD,
        num_labels=1,
    )
    return AutoModelForSequenceClassification.from_config(config, attn_implementation="sdpa").eval()


def standalone_scores(model: torch.nn.Module, sequences: list[list[int]]) -> torch.Tensor:
    """transformers' own scores: each sequence right-padded in one batch, pooled at its last non-pad token."""
    width = max(map(len, sequences))
    ids = torch.tensor([seq + [PAD] * (width - len(seq)) for seq in sequences])
    mask = torch.tensor([[1] * len(seq) + [0] * (width - len(seq)) for seq in sequences])
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits[:, 0]


@pytest.mark.parametrize("packed", [False, True])
def test_pair_rows_score_each_sequence_as_the_classifier_does_alone(packed):
    model = tiny_classifier()
    if packed:
        assert enable_pair_attention(model)
    # the second pair's chosen reply ends with the pad token id: transformers scores the token before it
    items = [
        {"prompt_ids": [5, 6, 7], "chosen_ids": [8, 9], "rejected_ids": [10, 11, 12], "margin": 0.5},
        {"prompt_ids": [13, 14], "chosen_ids": [15, PAD], "rejected_ids": [16], "margin": 0.0},
    ]
    collator = MarginPairCollator(PAD)
    micro = collator(items)
    assert micro["margin"].tolist() == [0.5, 0.0]
    with torch.no_grad():
        rewards = pair_rewards(model, micro, collator, packed=packed)
    sequences = [item["prompt_ids"] + item[side] for side in ("chosen_ids", "rejected_ids") for item in items]
    expected = standalone_scores(model, sequences)
    assert torch.allclose(rewards.T.reshape(-1), expected, atol=1e-5)
    assert sequence_ends(micro, PAD).tolist() == [[4, 7], [2, 4]]  # [15, PAD]: scored at 15, position 2


def test_sequence_ends_without_a_pad_token_id_are_the_last_tokens():
    micro = PairCollator(PAD)([{"prompt_ids": [1, 2], "chosen_ids": [3], "rejected_ids": [PAD, PAD]}])
    assert sequence_ends(micro, None).tolist() == [[2, 4]]
