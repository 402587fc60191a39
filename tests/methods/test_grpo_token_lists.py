"""A rollout's completion tokens as the rewards and the text decoding read them: each row's tokens where its mask
is set, whatever the mask's shape (a tool turn's answer masked out in the middle)."""

from __future__ import annotations

import torch

from honing.methods.grpo_rollouts import token_lists


def test_token_lists_keep_each_rows_masked_in_tokens():
    ids = torch.tensor([[5, 6, 7, 0], [8, 9, 10, 11], [12, 13, 14, 15]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 1], [0, 0, 0, 0]])
    assert token_lists(ids, mask) == [[5, 6, 7], [8, 11], []]
    assert token_lists(ids, mask) == [row[keep.bool()].tolist() for row, keep in zip(ids, mask)]
