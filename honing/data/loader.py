"""A deterministic, resumable, rank-sharded batch loader: the same seed gives the same batches, always.

An epoch's order is numpy's seeded permutation, held, as it always was, for up to ``HELD_ROWS`` rows and whenever
rows are grouped by length (which needs every length anyway); above that it is a ``SeededPermutation`` computed a
slice at a time, so a loader over billions of rows holds no order. Batch indices are made one batch at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from honing.data.chat.padding import length_grouped_order
from honing.data.collate import Collator, stack_collate
from honing.data.permutation import HELD_ROWS, Arange, SeededPermutation
from honing.errors import DataError

if TYPE_CHECKING:
    from honing.config.data_schema import DataSection

log = logging.getLogger(__name__)


class MapDataset(Protocol):
    """What the loaders read: a row by index and how many there are (a list of rows, or a map-style torch Dataset)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Any: ...


#: turns a batch's rows into the batch (a ``Collator``, or a plain function such as ``packed_collate``'s)
Collate = Collator | Callable[[list], Any]


class DataLoader:
    """Full global batches in a seeded per-epoch order; rank r gets its slice; resumable mid-epoch."""

    def __init__(
        self,
        dataset: MapDataset,
        *,
        global_batch_size: int,
        collate_fn: Collate | None = None,
        seed: int = 0,
        shuffle: bool = True,
        rank: int = 0,
        world_size: int = 1,
        group_by_length: bool = False,
        num_workers: int = 0,
    ):
        if world_size < 1 or not 0 <= rank < world_size:
            raise DataError(f"rank {rank} is not valid for world_size {world_size}")
        if global_batch_size < 1 or global_batch_size % world_size:
            raise DataError(
                f"global_batch_size ({global_batch_size}) must be a positive multiple of the world size ({world_size})"
            )
        if seed < 0:
            raise DataError(f"the data seed must be >= 0 (it seeds numpy's SeedSequence), got {seed}")
        if len(dataset) < global_batch_size:
            raise DataError(
                f"the dataset has {len(dataset)} rows, fewer than one global batch of "
                f"{global_batch_size}; add data or lower global_batch_size"
            )
        if num_workers < 0:
            raise DataError(f"num_workers must be >= 0, got {num_workers}")
        self.dataset = dataset
        self.num_workers = num_workers
        self.global_batch_size = global_batch_size
        self.local_batch_size = global_batch_size // world_size
        self.collate_fn = collate_fn or stack_collate
        self.seed = seed
        self.shuffle = shuffle
        self.rank = rank
        self.world_size = world_size
        self.epoch = 1
        self.batches_consumed = 0
        self._length = len(dataset)
        self._order_cache: tuple[int, np.ndarray | Arange | SeededPermutation] | None = None
        self._tokens_per_row: int | None | object = _UNKNOWN  # found once, when first asked
        # Length grouping needs every row's length up front; the order stays a pure function of
        # (seed, epoch, lengths), so it is resumable and the same global batch on every rank.
        self._lengths: np.ndarray | None = None
        if group_by_length:
            lengths = getattr(dataset, "lengths", None)
            if lengths is None or len(lengths) != self._length:
                raise DataError(
                    f"group_by_length needs a dataset with one length per row in `lengths` (such as "
                    f"PaddedDataset); {type(dataset).__name__} has none"
                )
            self._lengths = np.asarray(lengths)

    @property
    def batches_per_epoch(self) -> int:
        """Full global batches in one epoch (the remainder rows are dropped)."""
        return self._length // self.global_batch_size

    @property
    def total_batches(self) -> int:
        """OLMo-core's name for ``batches_per_epoch``: the batches one epoch holds."""
        return self.batches_per_epoch

    @property
    def tokens_per_batch(self) -> int | None:
        """Global tokens per batch when every row holds the same number (the dataset's ``tokens_per_row``, or
        rows held in a list that all have that many, stacked as they are), else None."""
        if self._tokens_per_row is _UNKNOWN:
            counted = rows_token_count(self.dataset) if self.collate_fn is stack_collate else None  # rows as they are
            self._tokens_per_row = getattr(self.dataset, "tokens_per_row", None) or counted
        return None if self._tokens_per_row is None else self._tokens_per_row * self.global_batch_size

    def order(self, epoch: int) -> np.ndarray:
        """The dataset indices in the order epoch ``epoch`` (1-based) visits them, all of them in one array."""
        return np.asarray(self._order(epoch)[:])

    def _order(self, epoch: int) -> np.ndarray | Arange | SeededPermutation:
        """Epoch ``epoch``'s order as something sliced into arrays: held, or computed slice by slice."""
        if self._order_cache is None or self._order_cache[0] != epoch:
            if self._lengths is None and not self.shuffle:
                order: np.ndarray | Arange | SeededPermutation = Arange(self._length)
            elif self._lengths is None and self._length > HELD_ROWS:
                order = SeededPermutation(self._length, [self.seed, epoch])
            else:
                rng = np.random.default_rng([self.seed, epoch])
                order = rng.permutation(self._length) if self.shuffle else np.arange(self._length)
                if self._lengths is not None:
                    order = length_grouped_order(
                        order, self._lengths, self.global_batch_size, rng=rng if self.shuffle else None
                    )
            self._order_cache = (epoch, order)
        return self._order_cache[1]

    def __iter__(self) -> Iterator[Any]:
        """The rest of the current epoch's local batches; afterwards the loader is at the next epoch."""
        starts = range(
            self.batches_consumed * self.global_batch_size + self.rank * self.local_batch_size,
            self.batches_per_epoch * self.global_batch_size,
            self.global_batch_size,
        )
        for batch in self._batches(_BatchIndices(self._order(self.epoch), starts, self.local_batch_size)):
            # Counted before the yield: a checkpoint taken while the batch trains must not replay it.
            self.batches_consumed += 1
            yield batch
        self.epoch += 1
        self.batches_consumed = 0

    def _batches(self, indices: _BatchIndices) -> Iterator[Any]:
        """Each list of rows read and collated, in order: here, or by ``num_workers`` worker processes that
        take whole batches in turn and read ahead (torch's DataLoader keeps their order)."""
        if self.num_workers == 0:
            for rows in indices:
                yield self.collate_fn([self.dataset[i] for i in rows])
            return
        workers = torch.utils.data.DataLoader(
            self.dataset,
            batch_sampler=indices,
            collate_fn=self.collate_fn,
            num_workers=self.num_workers,
            prefetch_factor=2,
        )
        yield from workers

    def state_dict(self) -> dict[str, int]:
        """The loader's position and the settings needed to check a resume against it."""
        return {
            "epoch": self.epoch,
            "batches_consumed": self.batches_consumed,
            "seed": self.seed,
            "global_batch_size": self.global_batch_size,
            "world_size": self.world_size,
            "dataset_length": self._length,
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume where ``state`` left off; a changed batch size keeps the number of rows consumed."""
        epoch, consumed = int(state["epoch"]), int(state["batches_consumed"])
        saved_batch = int(state.get("global_batch_size", self.global_batch_size))
        if saved_batch != self.global_batch_size:
            # Round down: repeating a few rows is better than silently skipping some.
            consumed = consumed * saved_batch // self.global_batch_size
            log.warning(
                "global_batch_size changed since the checkpoint (%d → %d): resuming after %d batches "
                "of epoch %d, the same rows consumed rounded down",
                saved_batch,
                self.global_batch_size,
                consumed,
                epoch,
            )
        if int(state.get("world_size", self.world_size)) != self.world_size:
            log.warning(
                "world size changed since the checkpoint (%s → %d): the global batch order is kept, "
                "each rank now takes a different slice",
                state.get("world_size"),
                self.world_size,
            )
        if int(state.get("seed", self.seed)) != self.seed:
            log.warning(
                "data seed changed since the checkpoint (%s → %d): the rest of the epoch follows the new order",
                state.get("seed"),
                self.seed,
            )
        if int(state.get("dataset_length", self._length)) != self._length:
            log.warning(
                "the dataset has %d rows but had %s at the checkpoint: the data changed, so the resumed "
                "order differs from the original run",
                self._length,
                state.get("dataset_length"),
            )
        self.epoch = epoch
        self.batches_consumed = min(consumed, self.batches_per_epoch)


_UNKNOWN = object()


def rows_token_count(dataset: MapDataset) -> int | None:
    """The tokens every row of an in-memory list of rows holds, when they all hold the same number: each an
    ``input_ids`` of one length with no padding (no ``attention_mask`` zeros, no ``num_real_tokens``, the counts
    the collators report), else None. Other datasets are not read ahead (they may be lazy or large)."""
    if not isinstance(dataset, (list, tuple)) or not dataset:
        return None
    lengths = set()
    for row in dataset:
        if not isinstance(row, Mapping) or "input_ids" not in row or "num_real_tokens" in row:
            return None
        mask = row.get("attention_mask")
        if mask is not None and not bool(torch.as_tensor(mask).bool().all()):
            return None
        lengths.add(int(torch.as_tensor(row["input_ids"]).numel()))
        if len(lengths) > 1:
            return None
    return lengths.pop()


class _BatchIndices:
    """This rank's batches of the epoch from ``starts`` on, as lists of row indices made one batch at a time (a
    torch ``DataLoader`` takes it as its ``batch_sampler``)."""

    def __init__(self, order: np.ndarray | Arange | SeededPermutation, starts: range, size: int):
        self.order = order
        self.starts = starts
        self.size = size

    def __len__(self) -> int:
        return len(self.starts)

    def __iter__(self) -> Iterator[list[int]]:
        for start in self.starts:
            yield self.order[start : start + self.size].tolist()


@dataclass(frozen=True)
class DataPlacement:
    """Where this process reads: its slice of the data-parallel dimension, the rows a validation batch holds, and
    the cache of prepared rows."""

    seed: int
    rank: int
    world_size: int
    eval_batch_size: int
    cache_dir: str
    progress: bool = False


def training_loader(
    dataset: MapDataset, collate: Collate, data: DataSection, place: DataPlacement, *, group_by_length: bool = False
) -> DataLoader:
    """The run's training DataLoader over ``dataset`` from its ``data`` section (batch size, shuffling, workers),
    seeded by ``place``, this rank's slice of the data-parallel dimension."""
    return DataLoader(
        dataset,
        global_batch_size=data.rows_per_step(place.world_size),
        collate_fn=collate,
        seed=place.seed,
        shuffle=data.shuffle,
        rank=place.rank,
        world_size=place.world_size,
        group_by_length=group_by_length,
        num_workers=data.num_workers,
    )
