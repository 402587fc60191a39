import math

import torch

from honing.losses import IGNORE_INDEX, count_correct, count_target_tokens, cross_entropy_sum, next_token_targets


def test_next_token_targets_shift():
    labels = torch.tensor([[5, 6, 7, IGNORE_INDEX]])
    assert next_token_targets(labels).tolist() == [[6, 7, IGNORE_INDEX, IGNORE_INDEX]]
    assert count_target_tokens(labels).item() == 2


def test_cross_entropy_sum_hand_computed():
    # vocab 2; position 0 predicts token 1 with logits (0, ln 3): p = 3/4 → loss ln(4/3)
    # position 1 predicts token 0 with logits (0, 0): p = 1/2 → loss ln 2; position 2 has no target
    logits = torch.tensor([[[0.0, math.log(3)], [0.0, 0.0], [5.0, 0.0]]])
    labels = torch.tensor([[0, 1, 0]])
    loss_sum = cross_entropy_sum(logits, labels)
    assert loss_sum.item() == torch.tensor(math.log(4 / 3) + math.log(2)).item()


def test_correct_counts_only_targets():
    logits = torch.tensor([[[0.0, 1.0], [1.0, 0.0], [1.0, 0.0]]])
    labels = torch.tensor([[0, 1, 0]])
    correct = count_correct(logits, labels)
    # targets (1, 0, ignore); argmax (1, 0, 0) → 2 correct, the ignored last position not counted
    assert correct.item() == 2
