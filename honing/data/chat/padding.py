"""Padded SFT batches: one example per row, right-padded to the batch's longest, and a length-grouped order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from honing.data.chat.flat_examples import FlatExamples, check_flat
from honing.data.collate import pad_collate
from honing.errors import DataError
from honing.losses import IGNORE_INDEX

# Rows are sorted by length within windows of this many global batches: wide enough that batches hold
# rows of similar length, narrow enough that the epoch still mixes short and long examples over time.
LENGTH_GROUP_WINDOW_BATCHES = 64

__all__ = ["LENGTH_GROUP_WINDOW_BATCHES", "PaddedDataset", "length_grouped_order", "pad_collate", "read_example"]


def read_example(example: Any, index: int) -> tuple[list[int], list[int]]:
    """The ``input_ids`` and ``labels`` of a tokenized example (an object or a mapping), checked."""
    try:
        if isinstance(example, Mapping):
            input_ids, labels = example["input_ids"], example["labels"]
        else:
            input_ids, labels = example.input_ids, example.labels
    except (KeyError, AttributeError) as error:
        raise DataError(f"example {index} has no {error}; expected fields input_ids and labels") from None
    input_ids, labels = [int(t) for t in input_ids], [int(t) for t in labels]
    if not input_ids:
        raise DataError(f"example {index} has no tokens; drop empty examples before batching")
    if len(input_ids) != len(labels):
        raise DataError(
            f"example {index}: input_ids has {len(input_ids)} tokens but labels has {len(labels)}; "
            "expected one label per token"
        )
    bad_token = next((t for t in input_ids if t < 0), None)
    if bad_token is not None:
        raise DataError(f"example {index}: input_ids holds {bad_token}; expected token ids >= 0")
    bad_label = next((t for t in labels if t < 0 and t != IGNORE_INDEX), None)
    if bad_label is not None:
        raise DataError(f"example {index}: labels hold {bad_label}; expected token ids >= 0 or {IGNORE_INDEX}")
    return input_ids, labels


class PaddedDataset(torch.utils.data.Dataset):
    """One tokenized example per item, ``{input_ids, labels}`` at its own length (pad with ``pad_collate``)."""

    def __init__(self, examples: Sequence[Any] | FlatExamples):
        if isinstance(examples, FlatExamples):  # views into two flat tensors: no Python list per example
            check_flat(examples)
            if not np.array_equal(examples.starts, np.cumsum(examples.lengths) - examples.lengths):  # not end to end
                examples = FlatExamples.gather(examples.input_ids, examples.labels, examples.starts, examples.lengths)
            sizes = examples.lengths.tolist()
            self.input_ids = list(torch.split(torch.from_numpy(examples.input_ids), sizes))
            self.labels = list(torch.split(torch.from_numpy(examples.labels), sizes))
            return
        pairs = [read_example(example, i) for i, example in enumerate(examples)]
        self.input_ids = [torch.tensor(ids, dtype=torch.long) for ids, _ in pairs]
        self.labels = [torch.tensor(labels, dtype=torch.long) for _, labels in pairs]

    @property
    def lengths(self) -> list[int]:
        """Tokens in each example (what ``DataLoader(group_by_length=True)`` sorts by)."""
        return [len(ids) for ids in self.input_ids]

    def __len__(self) -> int:
        return len(self.input_ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.input_ids[index], "labels": self.labels[index]}


def length_grouped_order(
    order: np.ndarray,
    lengths: np.ndarray,
    global_batch_size: int,
    *,
    rng: np.random.Generator | None,
    window_batches: int = LENGTH_GROUP_WINDOW_BATCHES,
) -> np.ndarray:
    """``order``'s full global batches regrouped so rows of similar length share a batch.

    Rows past the last full global batch are dropped (as the loader drops them); each window of
    ``window_batches`` global batches is sorted longest first and cut into batches, and ``rng``
    (when given) shuffles the batches so the epoch does not run from long to short.
    """
    usable = len(order) // global_batch_size * global_batch_size
    order = np.asarray(order[:usable])
    window = window_batches * global_batch_size
    # A stable sort: equal lengths keep the (seeded) order they came in, so the result is deterministic.
    windows = [order[start : start + window] for start in range(0, usable, window)]
    grouped = np.concatenate([w[np.argsort(-lengths[w], kind="stable")] for w in windows])
    batches = grouped.reshape(-1, global_batch_size)
    if rng is not None:
        batches = batches[rng.permutation(len(batches))]
    return batches.reshape(-1)
