import pytest
import torch

from honing.data.eval_batches import EvalBatches
from tests.helpers import TokenDataset


def rows(batches):
    return [row for batch in batches for row in batch["input_ids"].tolist()]


def test_restarts_from_the_beginning_every_time():
    batches = EvalBatches(TokenDataset(rows=10), batch_size=4)
    first = list(batches)
    assert [len(b["input_ids"]) for b in first] == [4, 4, 2]
    for _ in range(2):
        for _partial in batches:  # an evaluation that stops early must not shift the next one
            break
    assert all(torch.equal(a["input_ids"], b["input_ids"]) for a, b in zip(first, batches))
    assert len(batches) == 3


def test_ranks_split_every_row_once_and_yield_equally_many_batches():
    dataset = TokenDataset(rows=10)
    shards = [EvalBatches(dataset, batch_size=2, rank=r, world_size=2) for r in (0, 1)]
    batches = [list(shard) for shard in shards]
    # 5 batches: rank 0 has 3, rank 1 has 2 and a third whose labels are all masked, so that a
    # sharded model's forwards stay in step on both ranks
    assert [len(b) for b in batches] == [3, 3] and len(shards[0]) == len(shards[1]) == 3
    padding = batches[1][-1]
    assert torch.equal(padding["input_ids"], dataset.data[:2]) and bool((padding["labels"] == -100).all())
    real = batches[0] + batches[1][:-1]
    assert not any(bool((batch["labels"] == -100).all()) for batch in real)
    together = sorted(map(tuple, rows(real)))
    assert together == sorted(map(tuple, dataset.data.tolist()))


def test_the_settings_after_the_dataset_are_given_by_name():
    with pytest.raises(TypeError):
        EvalBatches(TokenDataset(rows=4), 2)  # type: ignore[misc]
