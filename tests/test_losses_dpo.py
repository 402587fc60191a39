"""DPO losses against numbers worked out by hand.

The pair: policy log-probs chosen −1, rejected −3; reference chosen −2, rejected −2.5; β = 0.5. Log-ratios:
chosen +1, rejected −0.5, so Δ = 1.5 and βΔ = 0.75; σ(0.75) = 0.679178699, log σ(0.75) = −0.386871006,
log σ(−0.75) = −1.136871006.
"""

import math

import pytest
import torch

from honing.dpo_losses import dpo_loss
from honing.losses import IGNORE_INDEX, completion_logps

PAIR = dict(
    policy_chosen=torch.tensor([-1.0]),
    policy_rejected=torch.tensor([-3.0]),
    ref_chosen=torch.tensor([-2.0]),
    ref_rejected=torch.tensor([-2.5]),
)


@pytest.mark.parametrize(
    ("loss_type", "options", "expected"),
    [
        ("sigmoid", {}, 0.386871006),  # −log σ(0.75)
        ("hinge", {}, 0.25),  # relu(1 − 0.75)
        # lengths 2 and 4: Δ' = 1/2 − (−0.5)/4 = 0.625; (0.625 − 1/(2·0.5))² = 0.140625
        ("ipo", {"chosen_lengths": torch.tensor([2]), "rejected_lengths": torch.tensor([4])}, 0.140625),
        # ε = 0.25: [0.75·0.386871006 − 0.25·1.136871006] / 0.5 = 0.011871006
        ("robust", {"label_smoothing": 0.25}, 0.011871006),
        # (1 − σ(0.5·1)) + σ(0.5·(−0.5)) = 0.377540669 + 0.437823499
        ("apo_zero", {}, 0.815364168),
    ],
)
def test_dpo_loss_by_hand(loss_type, options, expected):
    loss = dpo_loss(*PAIR.values(), beta=0.5, loss_type=loss_type, **options)
    assert loss.shape == (1,)
    assert loss.item() == pytest.approx(expected, abs=1e-7)


def test_dpo_loss_is_per_pair_and_zero_margin_gives_log_two():
    equal = torch.tensor([-4.0, -1.0])
    loss = dpo_loss(equal, equal, equal, equal, beta=0.1)
    torch.testing.assert_close(loss, torch.full((2,), math.log(2.0)))


def test_dpo_loss_refuses_unknown_types_and_bad_smoothing():
    with pytest.raises(ValueError, match="loss_type must be one of"):
        dpo_loss(*PAIR.values(), loss_type="kto")
    with pytest.raises(ValueError, match="label_smoothing < 0.5"):
        dpo_loss(*PAIR.values(), loss_type="robust", label_smoothing=0.5)
    with pytest.raises(ValueError, match="chosen_lengths"):
        dpo_loss(*PAIR.values(), loss_type="ipo")


def test_completion_logps_sums_each_completions_tokens():
    # one row, vocabulary 2, three positions; position 0 predicts token 1 with p = 3/4, the others are uniform.
    # completion 0: tokens 1 (from position 0) and 0 (from 1); completion 1: token 0 (from 0) and 1 (from 2)
    logits = torch.zeros(1, 3, 2)
    logits[0, 0] = torch.tensor([0.0, math.log(3.0)])
    targets = torch.tensor([[[1, 0], [0, IGNORE_INDEX], [IGNORE_INDEX, 1]]])
    logps, counts = completion_logps(logits, targets)
    expected = [[math.log(0.75) + math.log(0.5), math.log(0.25) + math.log(0.5)]]
    torch.testing.assert_close(logps, torch.tensor(expected))
    assert counts.tolist() == [[2, 2]]
    nothing = completion_logps(logits, torch.full_like(targets, IGNORE_INDEX))
    assert nothing[0].tolist() == [[0.0, 0.0]] and nothing[1].tolist() == [[0, 0]]
