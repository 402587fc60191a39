"""Orders of ``range(n)`` read a slice at a time, so an epoch's order costs no memory proportional to ``n``.

``SeededPermutation`` is a pseudo-random bijection of ``[0, n)`` keyed by a seed: a six-round Feistel network over
the smallest even number of bits that holds ``n`` (a domain under 4n), applied again to any value that lands at or
beyond ``n`` until it falls inside (cycle walking; under four rounds of it on average). Position ``i`` maps to its
row without computing any other, so a loader asks for one batch's rows at a time and resumes anywhere.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

HELD_ROWS = 1 << 16  # orders up to this many rows are numpy's, held (512 KiB of int64), as they always were
FEISTEL_ROUNDS = 6
CHUNK = 1 << 14  # positions computed together and kept (128 KiB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_MASK64 = (1 << 64) - 1


class Arange:
    """``range(n)`` as an order: slices are ``np.arange``."""

    def __init__(self, length: int):
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, positions: slice) -> np.ndarray:
        start, stop, step = positions.indices(self.length)
        return np.arange(start, stop, step, dtype=np.int64)


class SeededPermutation:
    """A seeded pseudo-random permutation of ``range(length)``; a slice gives the rows at those positions."""

    def __init__(self, length: int, seed: Sequence[int]):
        if length < 1:
            raise ValueError(f"a permutation needs length >= 1, got {length}")
        self.length = length
        bits = max(2, (length - 1).bit_length())
        self.half = np.uint64((bits + 1) // 2)
        self.mask = np.uint64((1 << int(self.half)) - 1)
        self.keys = np.random.SeedSequence(list(seed)).generate_state(FEISTEL_ROUNDS, dtype=np.uint64)
        self._int_keys = self.keys.tolist()
        self._chunk: tuple[int, np.ndarray] | None = None

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, positions: slice) -> np.ndarray:
        start, stop, step = positions.indices(self.length)
        if step != 1 or stop - start > CHUNK:
            return self._rows(np.arange(start, stop, step, dtype=np.uint64))
        # a batch at a time would pay numpy's per-call cost for a handful of rows: compute a chunk and keep it
        rows = []
        for chunk in range(start // CHUNK, -(-stop // CHUNK)):
            if self._chunk is None or self._chunk[0] != chunk:
                first = chunk * CHUNK
                self._chunk = (chunk, self._rows(np.arange(first, min(first + CHUNK, self.length), dtype=np.uint64)))
            offset = chunk * CHUNK
            rows.append(self._chunk[1][max(start - offset, 0) : stop - offset])
        return np.concatenate(rows) if len(rows) != 1 else rows[0].copy()

    def at(self, position: int) -> int:
        """The row at one ``position`` (Python integers: a few microseconds, no arrays)."""
        if not 0 <= position < self.length:
            raise IndexError(f"position {position} out of range for a permutation of {self.length}")
        half, mask, row = int(self.half), int(self.mask), position
        while True:
            left, right = row >> half, row & mask
            for key in self._int_keys:
                left, right = right, left ^ (_mix_int(right ^ key) & mask)
            row = (left << half) | right
            if row < self.length:
                return row

    def _rows(self, positions: np.ndarray) -> np.ndarray:
        rows = self._encrypt(positions)
        outside = np.flatnonzero(rows >= self.length)
        while len(outside):
            rows[outside] = self._encrypt(rows[outside])
            outside = outside[rows[outside] >= self.length]
        return rows.astype(np.int64)

    def _encrypt(self, values: np.ndarray) -> np.ndarray:
        left, right = values >> self.half, values & self.mask
        for key in self.keys:
            left, right = right, left ^ (_mix(right ^ key) & self.mask)
        return (left << self.half) | right


def _mix(values: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer: every output bit depends on every input bit (uint64 arithmetic wraps)."""
    values = values + _GOLDEN
    values = (values ^ (values >> np.uint64(30))) * _MIX1
    values = (values ^ (values >> np.uint64(27))) * _MIX2
    return values ^ (values >> np.uint64(31))


def _mix_int(value: int) -> int:
    """``_mix`` of one Python integer."""
    value = (value + 0x9E3779B97F4A7C15) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)
