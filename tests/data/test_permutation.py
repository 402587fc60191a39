"""``SeededPermutation``: a bijection of ``range(n)`` for every n, the same rows whether read whole, in slices
of any size or one position at a time, and different for another seed."""

from __future__ import annotations

import numpy as np
import pytest

from honing.data import permutation
from honing.data.permutation import Arange, SeededPermutation


@pytest.mark.parametrize("length", [1, 2, 3, 5, 17, 64, 1000, 4097])
def test_every_length_gives_a_permutation_read_the_same_in_any_slices(length, monkeypatch):
    monkeypatch.setattr(permutation, "CHUNK", 64)  # slices that cross cached chunks
    order = SeededPermutation(length, [7, 1])
    whole = order[:]
    assert sorted(whole.tolist()) == list(range(length))
    for step in (1, 5, 63, 200):
        assert np.concatenate([order[i : i + step] for i in range(0, length, step)]).tolist() == whole.tolist()
    assert [order.at(i) for i in range(0, length, 3)] == whole[::3].tolist() == order[::3].tolist()


def test_another_seed_gives_another_order_and_no_order_is_the_identity():
    first, second = SeededPermutation(1000, [0, 1])[:], SeededPermutation(1000, [0, 2])[:]
    assert first.tolist() != second.tolist()
    assert np.mean(first == np.arange(1000)) < 0.01  # about 1/n of the rows stay put in a random permutation
    assert abs(np.corrcoef(np.arange(1000), first)[0, 1]) < 0.1
    assert Arange(5)[1:4].tolist() == [1, 2, 3]
