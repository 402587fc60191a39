"""Validation batches: the same rows in the same order at every evaluation, sharded by rank."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from honing.data.loader import stack_collate


class EvalBatches:
    """Re-iterable from the start every time (unlike the training DataLoader, which resumes).

    Every row is used once; the last batch may be short. Rank r takes every world_size-th batch,
    so ranks never evaluate the same rows.
    """

    def __init__(self, dataset: Any, *, batch_size: int, collate_fn: Callable[[list], Any] | None = None,
                 rank: int = 0, world_size: int = 1):
        self.dataset = dataset
        self.batch_size = batch_size
        self.collate_fn = collate_fn or stack_collate
        self.rank = rank
        self.world_size = world_size

    def __len__(self) -> int:
        batches = -(-len(self.dataset) // self.batch_size)
        return len(range(self.rank, batches, self.world_size))

    def __iter__(self) -> Iterator[Any]:
        for start in range(self.rank * self.batch_size, len(self.dataset), self.batch_size * self.world_size):
            stop = min(start + self.batch_size, len(self.dataset))
            yield self.collate_fn([self.dataset[i] for i in range(start, stop)])
