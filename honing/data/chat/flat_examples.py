"""Tokenized examples laid end to end in flat arrays: what prepared rows load into without a Python object per
example (100k conversations in milliseconds), still read as a list of ``TokenizedExample`` where one is wanted."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from honing.data.chat.conversation import TokenizedExample
from honing.errors import DataError
from honing.losses import IGNORE_INDEX


@dataclass
class FlatExamples:
    """``len(starts)`` examples: example ``i`` is ``input_ids[starts[i] : starts[i] + lengths[i]]`` (and its labels)."""

    input_ids: np.ndarray  # int64, flat
    labels: np.ndarray  # int64, flat, IGNORE_INDEX where there is no loss
    starts: np.ndarray  # int64, one per example
    lengths: np.ndarray  # int64, one per example

    @classmethod
    def gather(cls, input_ids: np.ndarray, labels: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> FlatExamples:
        """The examples at ``starts`` / ``lengths`` of larger flat arrays (in that order, repeats allowed), copied
        into arrays of their own."""
        lengths = np.asarray(lengths, dtype=np.int64)
        ends = np.cumsum(lengths)
        positions = np.arange(int(ends[-1]) if len(ends) else 0, dtype=np.int64)
        source = positions + np.repeat(np.asarray(starts, dtype=np.int64) - (ends - lengths), lengths)
        return cls(
            np.asarray(input_ids[source], dtype=np.int64),
            np.asarray(labels[source], dtype=np.int64),
            ends - lengths,
            lengths,
        )

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, index: int) -> TokenizedExample:
        start, stop = int(self.starts[index]), int(self.starts[index] + self.lengths[index])
        return TokenizedExample(self.input_ids[start:stop].tolist(), self.labels[start:stop].tolist())

    def __iter__(self) -> Iterator[TokenizedExample]:
        return (self[index] for index in range(len(self)))


def check_flat(examples: FlatExamples) -> None:
    """The checks ``honing.data.chat.padding.read_example`` makes of each example, over all of them at once."""
    empty = np.flatnonzero(examples.lengths < 1)
    if len(empty):
        raise DataError(f"example {int(empty[0])} has no tokens; drop empty examples before batching")
    if len(examples.input_ids) and int(examples.input_ids.min()) < 0:
        raise DataError(f"input_ids hold {int(examples.input_ids.min())}; expected token ids >= 0")
    bad = examples.labels[(examples.labels < 0) & (examples.labels != IGNORE_INDEX)]
    if len(bad):
        raise DataError(f"labels hold {int(bad[0])}; expected token ids >= 0 or {IGNORE_INDEX}")
