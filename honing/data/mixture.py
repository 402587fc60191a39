"""A split's sources mixed by proportion: which row of which source each draw takes, as ``datasets``'
``interleave_datasets`` picks them (the same seed gives the same rows), with each source's repetition reported and
bounded."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from honing.errors import DataError

log = logging.getLogger(__name__)

DRAW_BLOCK = 1000  # datasets draws sources in blocks of 1000: the same blocks give the same rows for a seed


@dataclass(frozen=True)
class MixedSource:
    """One source's part of a mixture: its rows, the rows drawn from it and how many times over that is."""

    path: str
    rows: int
    drawn: int

    @property
    def repetition(self) -> float:
        """Rows drawn over rows held (above 1: some rows are used more than once)."""
        return self.drawn / self.rows if self.rows else 0.0


def mixture_indices(
    counts: Sequence[int],
    proportions: Sequence[float] | None,
    *,
    stop: str = "first_exhausted",
    rows: int | None = None,
    seed: int | None = 0,
) -> list[int]:
    """Indices into the concatenation of sources of ``counts`` rows, in draw order: each draw picks a source by
    ``proportions`` (None: the sources take turns) and takes its next row, until ``stop`` (``datasets``'
    stopping strategies) or, given ``rows``, that many draws (a source that runs out starts again)."""
    lengths = np.asarray(counts, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    if (lengths == 0).any():
        empty = int(np.flatnonzero(lengths == 0)[0])
        raise DataError(f"mixture source {empty} holds no rows; remove it or give it rows")
    if proportions is None:
        return _turns(lengths, offsets, stop, rows)
    probabilities = np.asarray(proportions, dtype=np.float64)
    probabilities = probabilities / probabilities.sum()
    rng = np.random.default_rng(seed)
    if stop == "all_exhausted_without_replacement" and rows is None:
        return _without_replacement(lengths, offsets, rng, probabilities)
    draws = _draws(lengths, rng, probabilities, stop, rows)
    # each source's k-th draw takes its row k, from the first row again once it has run out
    indices = np.empty(len(draws), dtype=np.int64)
    for source in range(len(lengths)):
        where = np.flatnonzero(draws == source)
        indices[where] = np.arange(len(where)) % lengths[source] + offsets[source]
    return indices.tolist()


def _draws(
    lengths: np.ndarray, rng: np.random.Generator, probabilities: np.ndarray, stop: str, rows: int | None
) -> np.ndarray:
    """The sources drawn, in order, up to the stopping draw: the one that takes some (``first_exhausted``) or every
    (``all_exhausted``) source's last row, or the ``rows``-th."""
    blocks, drawn = [], np.zeros(len(lengths), dtype=np.int64)
    while True:
        block = rng.choice(len(lengths), size=DRAW_BLOCK, p=probabilities)
        blocks.append(block)
        drawn += np.bincount(block, minlength=len(lengths))
        total = len(blocks) * DRAW_BLOCK
        if rows is not None:
            if total >= rows:
                return np.concatenate(blocks)[:rows]
            continue
        reached = drawn >= lengths
        if reached.all() or (stop == "first_exhausted" and reached.any()):
            break
    draws = np.concatenate(blocks)
    # the draw that takes source s's last row is its lengths[s]-th; the stop is the first or the last of those
    last_rows = []
    for source in range(len(lengths)):
        drawn_at = np.flatnonzero(draws == source)
        if len(drawn_at) >= lengths[source]:
            last_rows.append(drawn_at[lengths[source] - 1])
    end = min(last_rows) if stop == "first_exhausted" else max(last_rows)
    return draws[: end + 1]


def _without_replacement(
    lengths: np.ndarray, offsets: np.ndarray, rng: np.random.Generator, probabilities: np.ndarray
) -> list[int]:
    """Every row once, a drawn source that has run out skipped (the draw still counts, as in ``datasets``)."""
    taken = np.zeros(len(lengths), dtype=np.int64)
    indices: list[int] = []
    while (taken < lengths).any():
        for source in rng.choice(len(lengths), size=DRAW_BLOCK, p=probabilities).tolist():
            if taken[source] < lengths[source]:
                indices.append(int(taken[source] + offsets[source]))
                taken[source] += 1
            if (taken >= lengths).all():
                break
    return indices


def _turns(lengths: np.ndarray, offsets: np.ndarray, stop: str, rows: int | None) -> list[int]:
    """The sources in turn, one row each: while every source has rows (``first_exhausted``), until the longest has
    given all (``all_exhausted``: the others start again), each row once, or ``rows`` turns."""
    if rows is not None:
        turn = np.arange(rows)
        source = turn % len(lengths)
        return ((turn // len(lengths)) % lengths[source] + offsets[source]).tolist()
    if stop == "first_exhausted":
        return (offsets[None, :] + np.arange(lengths.min())[:, None]).ravel().tolist()
    if stop == "all_exhausted":
        return (np.arange(lengths.max())[:, None] % lengths[None, :] + offsets[None, :]).ravel().tolist()
    return [int(offsets[s] + k) for k in range(int(lengths.max())) for s in range(len(lengths)) if k < lengths[s]]


def mixture_report(counts: Sequence[int], paths: Sequence[str], indices: Sequence[int]) -> list[MixedSource]:
    """Each source's rows and the rows the mixture draws from it."""
    bounds = np.cumsum(counts)
    drawn = np.bincount(
        np.searchsorted(bounds, np.asarray(indices, dtype=np.int64), side="right"), minlength=len(counts)
    )
    return [MixedSource(path, int(count), int(taken)) for path, count, taken in zip(paths, counts, drawn)]


def mixed_picks(counts: Sequence[int], sources: Sequence[Any], mixture: Any, *, seed: int, where: str) -> list[int]:
    """The rows a ``mixture`` section draws from ``sources`` of ``counts`` rows (``where`` names the split), each
    source's share and repetition logged, a repetition beyond ``mixture.max_repetition`` an error naming it."""
    proportions = [source.proportion for source in sources]
    picks = mixture_indices(
        counts,
        None if all(p is None for p in proportions) else proportions,
        stop=mixture.stop,
        rows=mixture.rows,
        seed=seed if mixture.seed is None else mixture.seed,
    )
    report = mixture_report(counts, [source.path for source in sources], picks)
    for index, part in enumerate(report):
        log.info(
            "%s mixture: source %d (%r) gives %d of %d rows (%.1f%%), its rows used %.2f times",
            where,
            index,
            part.path,
            part.drawn,
            len(picks),
            100 * part.drawn / max(len(picks), 1),
            part.repetition,
        )
        if mixture.max_repetition is not None and part.repetition > mixture.max_repetition:
            raise DataError(
                f"{where}.sources[{index}] ({part.path!r}): the mixture uses its {part.rows} rows "
                f"{part.repetition:.2f} times, over {where}.mixture.max_repetition ({mixture.max_repetition:g}); "
                "give it a smaller proportion, more rows, stop: first_exhausted or a larger max_repetition"
            )
    return picks
