"""A seeded random subset of a source's rows (``sample_seed`` with ``max_samples``): the rows ``datasets`` keeps."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

import numpy as np

Item = TypeVar("Item")


def seeded_subset(items: Iterable[Item], count: int, seed: int) -> list[Item]:
    """``count`` of ``items`` (all of them when there are fewer) in their own order: the ones that
    ``datasets.Dataset.shuffle(seed=seed).take(count)`` keeps (its permutation is numpy's ``default_rng(seed)``), so a
    config moved from Oumi (``shuffle`` with ``sample_count``) trains on the same rows."""
    every = list(items)
    chosen = np.random.default_rng(seed).permutation(len(every))[:count]
    return [every[index] for index in sorted(chosen.tolist())]
