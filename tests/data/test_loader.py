"""Tests for honing/data/loader.py: seeded order (held or computed slice by slice), rank sharding, epochs,
bit-identical resume."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from honing.data import loader as loader_module
from honing.data.collate import stack_collate
from honing.data.loader import DataLoader
from honing.errors import DataError


class Rows(torch.utils.data.Dataset):
    """Row i is [i, i, i] (so a batch says which rows it holds), with an attention mask of i % 3 + 1 ones."""

    def __init__(self, rows: int = 20, with_mask: bool = False):
        self.rows, self.with_mask = rows, with_mask

    def __len__(self):
        return self.rows

    def __getitem__(self, index):
        item = {"input_ids": torch.full((3,), index), "labels": torch.full((3,), index)}
        if self.with_mask:
            item["attention_mask"] = (torch.arange(3) <= index % 3).long()
        return item


def row_ids(batch):
    return batch["input_ids"][:, 0].tolist()


def epoch_rows(loader):
    return [row_ids(batch) for batch in loader]


def test_epoch_order_is_the_seeded_permutation_in_full_batches():
    loader = DataLoader(Rows(20), global_batch_size=6, seed=7)
    assert loader.batches_per_epoch == 3
    permutation = np.random.default_rng([7, 1]).permutation(20).tolist()
    assert epoch_rows(loader) == [permutation[0:6], permutation[6:12], permutation[12:18]]  # 2 rows dropped
    assert (loader.epoch, loader.batches_consumed) == (2, 0)
    assert epoch_rows(DataLoader(Rows(20), global_batch_size=6, seed=7, shuffle=False)) == [
        list(range(0, 6)),
        list(range(6, 12)),
        list(range(12, 18)),
    ]


def test_same_seed_same_batches_and_epochs_differ():
    first, second = DataLoader(Rows(), global_batch_size=4, seed=1), DataLoader(Rows(), global_batch_size=4, seed=1)
    assert epoch_rows(first) == epoch_rows(second)
    assert epoch_rows(first) != epoch_rows(DataLoader(Rows(), global_batch_size=4, seed=2))
    assert epoch_rows(first) != epoch_rows(DataLoader(Rows(), global_batch_size=4, seed=1))  # epoch 2 ≠ epoch 1


def test_epoch_rollover_happens_once_per_epoch():
    loader = DataLoader(Rows(8), global_batch_size=4)
    seen = []
    for expected_consumed, batch in enumerate(loader, start=1):
        assert (loader.epoch, loader.batches_consumed) == (1, expected_consumed)  # counted before use
        seen += row_ids(batch)
    assert sorted(seen) == list(range(8))  # no row twice in an epoch
    assert (loader.epoch, loader.batches_consumed) == (2, 0)
    assert len(epoch_rows(loader)) == 2
    assert (loader.epoch, loader.batches_consumed) == (3, 0)


def test_two_ranks_together_are_the_one_rank_batch():
    single = epoch_rows(DataLoader(Rows(20), global_batch_size=8, seed=3))
    ranks = [epoch_rows(DataLoader(Rows(20), global_batch_size=8, seed=3, rank=r, world_size=2)) for r in (0, 1)]
    assert [r0 + r1 for r0, r1 in zip(*ranks)] == single
    seen = [row for rank in ranks for batch in rank for row in batch]
    assert len(seen) == len(set(seen)) == 16


def test_resume_mid_epoch_is_bit_identical():
    dataset = Rows(30)
    reference = DataLoader(dataset, global_batch_size=4, seed=5)
    expected = [batch for _ in range(2) for batch in reference]  # two full epochs

    interrupted = DataLoader(dataset, global_batch_size=4, seed=5)
    taken = []
    for batch in interrupted:
        taken.append(batch)
        if len(taken) == 3:
            break
    state = interrupted.state_dict()
    assert state == {
        "epoch": 1,
        "batches_consumed": 3,
        "seed": 5,
        "global_batch_size": 4,
        "world_size": 1,
        "dataset_length": 30,
    }
    resumed = DataLoader(dataset, global_batch_size=4, seed=5)
    resumed.load_state_dict(state)
    taken += [batch for _ in range(2) for batch in resumed]  # rest of epoch 1, then epoch 2
    assert len(taken) == len(expected) == 14
    for got, want in zip(taken, expected):
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)


def test_resume_at_the_end_of_an_epoch_moves_to_the_next():
    loader = DataLoader(Rows(8), global_batch_size=4, seed=0)
    iterator = iter(loader)
    next(iterator), next(iterator)  # the trainer stopped right after the last batch of epoch 1
    resumed = DataLoader(Rows(8), global_batch_size=4, seed=0)
    resumed.load_state_dict(loader.state_dict())
    assert epoch_rows(resumed) == []  # nothing left of epoch 1 ...
    assert resumed.epoch == 2
    reference = DataLoader(Rows(8), global_batch_size=4, seed=0)
    epoch_rows(reference)
    assert epoch_rows(resumed) == epoch_rows(reference)  # ... and epoch 2 is the uninterrupted epoch 2


def test_resume_with_other_world_size_keeps_global_position(caplog):
    loader = DataLoader(Rows(20), global_batch_size=4, seed=9)
    iterator = iter(loader)
    next(iterator)
    rest = [row for batch in iterator for row in row_ids(batch)]
    state = DataLoader(Rows(20), global_batch_size=4, seed=9)
    next(iter(state))
    ranks = []
    for rank in (0, 1):
        sharded = DataLoader(Rows(20), global_batch_size=4, seed=9, rank=rank, world_size=2)
        with caplog.at_level(logging.WARNING):
            sharded.load_state_dict(state.state_dict())
        ranks.append(epoch_rows(sharded))
    assert [row for r0, r1 in zip(*ranks) for row in r0 + r1] == rest
    assert "world size changed" in caplog.text


def test_resume_with_other_batch_size_keeps_rows_consumed(caplog):
    loader = DataLoader(Rows(24), global_batch_size=4, seed=0)
    iterator = iter(loader)
    for _ in range(3):
        next(iterator)  # 12 rows consumed
    bigger = DataLoader(Rows(24), global_batch_size=8, seed=0)
    bigger.load_state_dict(loader.state_dict())
    assert bigger.batches_consumed == 1  # 12 rows in batches of 8: round down, never skip rows
    assert "global_batch_size changed" in caplog.text


def test_collator_counts_real_tokens():
    plain = DataLoader(Rows(8), global_batch_size=4, rank=1, world_size=2)
    assert stack_collate.num_tokens(next(iter(plain))) == 2 * 3  # this rank's rows, every id
    masked = DataLoader(Rows(8, with_mask=True), global_batch_size=4, shuffle=False)
    batch = next(iter(masked))  # rows 0..3: 1 + 2 + 3 + 1 ones
    assert stack_collate.num_tokens(batch) == 7


def test_tokens_per_batch_comes_from_the_dataset():
    class FullRows(Rows):
        tokens_per_row = 3

    assert DataLoader(FullRows(8), global_batch_size=4).tokens_per_batch == 12
    assert DataLoader(Rows(8), global_batch_size=4).tokens_per_batch is None


def test_custom_collate_and_stack_collate():
    loader = DataLoader(Rows(4), global_batch_size=2, shuffle=False, collate_fn=lambda items: len(items))
    assert list(loader) == [2, 2]
    batch = stack_collate([{"x": torch.ones(2), "n": 1, "s": "a"}, {"x": torch.zeros(2), "n": 2, "s": "b"}])
    assert batch["x"].shape == (2, 2) and batch["n"].tolist() == [1, 2] and batch["s"] == ["a", "b"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"global_batch_size": 6, "world_size": 4},
            r"global_batch_size \(6\) must be a positive multiple of the "
            r"world size \(4\)",
        ),
        ({"global_batch_size": 32}, "the dataset has 20 rows, fewer than one global batch of 32"),
        ({"global_batch_size": 4, "rank": 2, "world_size": 2}, "rank 2 is not valid for world_size 2"),
    ],
)
def test_invalid_settings(kwargs, message):
    with pytest.raises(DataError, match=message):
        DataLoader(Rows(20), **kwargs)


def test_worker_processes_give_the_same_batches_ranks_and_resume():
    """num_workers=2: the same batches in the same order as in-process, the same rank slices, and a resume
    mid-epoch (the position counts yielded batches, not the ones the workers read ahead) continues exactly."""
    dataset = Rows(30, with_mask=True)
    for rank in (0, 1):
        settings = {"global_batch_size": 4, "seed": 5, "rank": rank, "world_size": 2, "group_by_length": False}
        reference = DataLoader(dataset, **settings)
        expected = [batch for _ in range(2) for batch in reference]  # two epochs
        loader = DataLoader(dataset, num_workers=2, **settings)
        taken = []
        for batch in loader:
            taken.append(batch)
            if len(taken) == 3:
                break
        state = loader.state_dict()
        assert (state["epoch"], state["batches_consumed"]) == (1, 3)
        resumed = DataLoader(dataset, num_workers=2, **settings)
        resumed.load_state_dict(state)
        taken += [batch for _ in range(2) for batch in resumed]
        assert len(taken) == len(expected) == 14
        for got, want in zip(taken, expected):
            assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    with pytest.raises(DataError, match="num_workers must be >= 0, got -1"):
        DataLoader(dataset, global_batch_size=4, num_workers=-1)


@pytest.fixture
def computed_order(monkeypatch):
    """Orders of more than 16 rows computed slice by slice (as for billions of rows), not held."""
    monkeypatch.setattr(loader_module, "HELD_ROWS", 16)


def test_a_computed_order_visits_each_row_once_per_epoch_and_epochs_differ(computed_order):
    loader = DataLoader(Rows(50), global_batch_size=5, seed=4)
    first, second = epoch_rows(loader), epoch_rows(loader)
    assert sorted(row for batch in first for row in batch) == list(range(50))
    assert first != second and first != sorted(first)
    assert first == epoch_rows(DataLoader(Rows(50), global_batch_size=5, seed=4))  # a pure function of the seed
    assert first != epoch_rows(DataLoader(Rows(50), global_batch_size=5, seed=5))
    assert loader.order(1).tolist() == [row for batch in first for row in batch]
    held = DataLoader(Rows(16), global_batch_size=4, seed=4)  # at the threshold: numpy's permutation, as before
    assert held.order(1).tolist() == np.random.default_rng([4, 1]).permutation(16).tolist()


def test_a_computed_order_splits_across_ranks_and_resumes_mid_epoch(computed_order):
    single = epoch_rows(DataLoader(Rows(40), global_batch_size=8, seed=3))
    ranks = [epoch_rows(DataLoader(Rows(40), global_batch_size=8, seed=3, rank=r, world_size=2)) for r in (0, 1)]
    assert [r0 + r1 for r0, r1 in zip(*ranks)] == single
    stopped = DataLoader(Rows(40), global_batch_size=8, seed=3)
    iterator = iter(stopped)
    taken = [row_ids(next(iterator)) for _ in range(2)]
    resumed = DataLoader(Rows(40), global_batch_size=8, seed=3)
    resumed.load_state_dict(stopped.state_dict())
    assert taken + epoch_rows(resumed) == single
