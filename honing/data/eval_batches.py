"""Validation batches: the same rows in the same order at every evaluation, sharded by rank."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from honing.data.loader import stack_collate
from honing.losses import IGNORE_INDEX


class EvalBatches:
    """Re-iterable from the start every time (unlike the training DataLoader, which resumes).

    Every row is used once; the last batch may be short. Rank r takes every world_size-th batch,
    so ranks never evaluate the same rows. Every rank yields the same number of batches: a rank
    that runs out repeats its first batch with every label masked (no loss, no tokens), because a
    sharded (FSDP2) model needs all ranks in each forward.
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
        return -(-batches // self.world_size)  # the most any rank has

    def __iter__(self) -> Iterator[Any]:
        starts = range(self.rank * self.batch_size, len(self.dataset), self.batch_size * self.world_size)
        for start in starts:
            stop = min(start + self.batch_size, len(self.dataset))
            yield self.collate_fn([self.dataset[i] for i in range(start, stop)])
        for _ in range(len(self) - len(starts)):
            yield _masked(self.collate_fn([self.dataset[i] for i in range(min(self.batch_size, len(self.dataset)))]))


def _masked(batch: dict[str, Any]) -> dict[str, Any]:
    """The batch with every label ignored (-100) and no real tokens: a forward that counts for nothing."""
    masked = dict(batch)
    masked["labels"] = torch.full_like(batch["labels"], IGNORE_INDEX)
    if "num_real_tokens" in masked:
        masked["num_real_tokens"] = torch.zeros_like(torch.as_tensor(masked["num_real_tokens"]))
    return masked
