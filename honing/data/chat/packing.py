"""Padding-free packing for SFT: examples best-fit into rows of max_length, kept apart by position_ids.

Each row holds several documents with ``position_ids`` restarting at 0 at every document and no
``attention_mask``. transformers 5.x then builds a causal mask per document from the position_ids
(``find_packed_sequence_indices`` in ``transformers.masking_utils``; checked for sdpa and eager by
tests/data/test_packing.py). Two pitfalls:

- it only does so when no KV cache exists: the model must be called with ``use_cache=False`` (the
  config default ``use_cache=True`` creates a cache and the documents silently attend to each other);
- ``attn_implementation="flash_attention_2"`` takes the same position_ids and turns them into
  per-document ``cu_seqlens``, but only in a batch of one row: under flash attention the micro-batch's rows are
  laid end to end (``honing.data.collate.VarlenCollator``; ``model.attn_implementation: auto`` picks flash or
  flex_attention for packed rows on CUDA, see ``honing.models.attention_choice``); the pad tail is its own
  document there too. The kernels themselves need a GPU and are not run by the suite.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from honing.data.chat.flat_examples import FlatExamples, check_flat
from honing.data.chat.padding import read_example
from honing.errors import DataError
from honing.losses import IGNORE_INDEX

__all__ = ["PackedDataset", "best_fit_decreasing"]


class _OpenBins:
    """Open bins by remaining capacity: a Fenwick tree of counts finds the tightest fit in O(log max_length)."""

    def __init__(self, max_length: int):
        self.size = max_length + 1  # capacities 0..max_length
        self.tree = [0] * (self.size + 1)
        self.by_capacity: dict[int, list[int]] = {}  # capacity -> min-heap of bin ids (ties go to the oldest bin)
        self.top_step = 1 << (self.size.bit_length() - 1)

    def _add(self, capacity: int, delta: int) -> None:
        i = capacity + 1
        while i <= self.size:
            self.tree[i] += delta
            i += i & -i

    def _count_below(self, capacity: int) -> int:
        total, i = 0, capacity
        while i > 0:
            total += self.tree[i]
            i -= i & -i
        return total

    def push(self, bin_id: int, capacity: int) -> None:
        """Register ``bin_id`` as having ``capacity`` tokens free."""
        heapq.heappush(self.by_capacity.setdefault(capacity, []), bin_id)
        self._add(capacity, 1)

    def pop_tightest(self, length: int) -> tuple[int, int] | None:
        """Remove and return (bin id, capacity) of the open bin with the least room >= ``length``, if any."""
        # Fenwick lower bound: the largest position whose prefix count stays below the rank of the
        # first bin with capacity >= length; that position is the wanted capacity.
        remaining, position, step = self._count_below(length) + 1, 0, self.top_step
        while step:
            if position + step <= self.size and self.tree[position + step] < remaining:
                position += step
                remaining -= self.tree[position]
            step >>= 1
        if position >= self.size:
            return None
        bins = self.by_capacity[position]
        bin_id = heapq.heappop(bins)
        if not bins:
            del self.by_capacity[position]
        self._add(position, -1)
        return bin_id, position


def best_fit_decreasing(lengths: Sequence[int], max_length: int) -> list[list[int]]:
    """Bins of example indices (longest first, each into the fullest bin it fits), no bin over max_length."""
    if max_length < 1:
        raise DataError(f"max_length must be >= 1, got {max_length}")
    for index, length in enumerate(lengths):
        if not 1 <= length <= max_length:
            raise DataError(
                f"example {index} has {length} tokens; packing expects 1..max_length={max_length} "
                "(truncate or drop longer examples before packing)"
            )
    bins: list[list[int]] = []
    open_bins = _OpenBins(max_length)
    # Ties broken by index so the packing is the same on every rank and every run.
    for index in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        length = lengths[index]
        found = open_bins.pop_tightest(length)
        if found is None:
            bin_id, capacity = len(bins), max_length
            bins.append([])
        else:
            bin_id, capacity = found
        bins[bin_id].append(index)
        if capacity > length:  # a full bin can take nothing more: not worth tracking
            open_bins.push(bin_id, capacity - length)
    return bins


class PackedDataset(torch.utils.data.Dataset):
    """Rows of exactly ``max_length`` tokens packed from tokenized examples, with per-document position_ids."""

    def __init__(self, examples: Sequence[Any] | FlatExamples, max_length: int, *, pad_token_id: int):
        if pad_token_id is None or int(pad_token_id) < 0:
            raise DataError(f"pad_token_id is {pad_token_id!r}; packing needs a pad token id >= 0")
        flat = examples if isinstance(examples, FlatExamples) else _flatten(examples)
        if not len(flat):
            raise DataError("there are no examples to pack")
        check_flat(flat)
        self.max_length = max_length
        self.bins = best_fit_decreasing(flat.lengths.tolist(), max_length)
        input_ids, labels, position_ids, real = _fill_rows(flat, self.bins, max_length, int(pad_token_id))
        self.input_ids, self.labels = torch.from_numpy(input_ids), torch.from_numpy(labels)
        self.position_ids, self.real_tokens = torch.from_numpy(position_ids), torch.from_numpy(real)

    @property
    def num_real_tokens(self) -> int:
        """Non-pad tokens over all rows."""
        return int(self.real_tokens.sum())

    @property
    def packing_efficiency(self) -> float:
        """Real tokens / (rows * max_length): 1.0 means no padding at all."""
        return self.num_real_tokens / self.input_ids.numel()

    def __len__(self) -> int:
        return len(self.bins)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {
            "input_ids": self.input_ids[index],
            "labels": self.labels[index],
            "position_ids": self.position_ids[index],
            "num_real_tokens": int(self.real_tokens[index]),
        }


def _flatten(examples: Sequence[Any]) -> FlatExamples:
    """Examples (objects or mappings with ``input_ids`` and ``labels``), each checked, laid end to end."""
    pairs = [read_example(example, i) for i, example in enumerate(examples)]
    lengths = np.array([len(ids) for ids, _ in pairs], dtype=np.int64)
    ids = np.fromiter((token for pair in pairs for token in pair[0]), dtype=np.int64, count=int(lengths.sum()))
    labels = np.fromiter((label for pair in pairs for label in pair[1]), dtype=np.int64, count=int(lengths.sum()))
    return FlatExamples(ids, labels, np.cumsum(lengths) - lengths, lengths)


def _fill_rows(
    examples: FlatExamples, bins: list[list[int]], max_length: int, pad_token_id: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The packed rows' ids, labels and position_ids, and each row's real tokens: every example copied to its place
    in one scatter (examples follow each other from the start of their row, in bin order)."""
    sizes = np.array([len(indices) for indices in bins], dtype=np.int64)
    order = np.fromiter(itertools.chain.from_iterable(bins), dtype=np.int64, count=int(sizes.sum()))
    lengths = examples.lengths[order]
    row = np.repeat(np.arange(len(bins), dtype=np.int64), sizes)
    begins = np.cumsum(lengths) - lengths  # where each example begins, counted over every row end to end
    row_begin = begins[np.cumsum(sizes) - sizes][row]  # ... and where its row's first example begins
    first = row * max_length + begins - row_begin  # the example's first slot in the [rows * max_length] grid
    within = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(begins, lengths)  # position in its document
    target = np.repeat(first, lengths) + within
    source = np.repeat(examples.starts[order], lengths) + within
    shape = (len(bins), max_length)
    input_ids = np.full(shape, pad_token_id, dtype=np.int64)
    labels = np.full(shape, IGNORE_INDEX, dtype=np.int64)
    input_ids.reshape(-1)[target] = examples.input_ids[source]
    labels.reshape(-1)[target] = examples.labels[source]
    # The shifted loss predicts label j from position j-1, i.e. from the previous document.
    labels.reshape(-1)[first] = IGNORE_INDEX
    real = np.bincount(row, weights=lengths, minlength=len(bins)).astype(np.int64)
    # The pad tail counts from 0 as a document of its own, so no real token attends to it.
    position_ids = np.arange(max_length, dtype=np.int64)[None, :] - real[:, None]
    position_ids.reshape(-1)[target] = within
    return input_ids, labels, position_ids, real
