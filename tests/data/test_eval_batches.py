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
        for partial in batches:  # an evaluation that stops early must not shift the next one
            break
    assert all(torch.equal(a["input_ids"], b["input_ids"]) for a, b in zip(first, batches))
    assert len(batches) == 3


def test_ranks_split_every_row_once():
    dataset = TokenDataset(rows=10)
    shards = [EvalBatches(dataset, batch_size=2, rank=r, world_size=2) for r in (0, 1)]
    together = sorted(map(tuple, rows(shards[0]) + rows(shards[1])))
    assert together == sorted(map(tuple, dataset.data.tolist()))
    assert len(shards[0]) == 3 and len(shards[1]) == 2
