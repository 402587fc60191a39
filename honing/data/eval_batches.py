"""Validation batches: the same rows in the same order at every evaluation, sharded by rank."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import KW_ONLY, dataclass
from typing import Any

from honing.data.collate import stack_collate
from honing.data.loader import Collate, MapDataset


@dataclass(eq=False)
class EvalBatches:
    """Re-iterable from the start every time (unlike the training DataLoader, which resumes).

    Every row is used once; the last batch may be short. Rank r takes every world_size-th batch,
    so ranks never evaluate the same rows. Every rank yields the same number of batches: a rank
    that runs out repeats its first batch as the collator's filler (no loss, no tokens), because a
    sharded (FSDP2) model needs all ranks in each forward.
    """

    dataset: MapDataset
    _: KW_ONLY
    batch_size: int
    collate_fn: Collate | None = None  # None: rows stacked as they are (stack_collate)
    rank: int = 0
    world_size: int = 1

    def __post_init__(self) -> None:
        self.collate_fn = self.collate_fn or stack_collate

    def __len__(self) -> int:
        batches = -(-len(self.dataset) // self.batch_size)
        return -(-batches // self.world_size)  # the most any rank has

    def __iter__(self) -> Iterator[Any]:
        starts = range(self.rank * self.batch_size, len(self.dataset), self.batch_size * self.world_size)
        for start in starts:
            stop = min(start + self.batch_size, len(self.dataset))
            yield self.collate_fn([self.dataset[i] for i in range(start, stop)])
        for _ in range(len(self) - len(starts)):
            first = self.collate_fn([self.dataset[i] for i in range(min(self.batch_size, len(self.dataset)))])
            yield self.collate_fn.filler(first)


class SourceBatches:
    """The validation batches of several named sources, evaluated one source after another: iterating gives every
    source's batches in turn, ``parts`` each source's own (for ``eval/<source name>/*``)."""

    def __init__(self, parts: dict[str, EvalBatches]):
        self.parts = parts

    def __len__(self) -> int:
        return sum(len(part) for part in self.parts.values())

    def __iter__(self) -> Iterator[Any]:
        for part in self.parts.values():
            yield from part
