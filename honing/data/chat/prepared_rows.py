"""Chat rows (SFT) fitted to a row length, over a table's columns at once: no Python object per row, so 100k
prepared conversations are ready in a fraction of a second.

A row is kept whole when it fits; a longer one is dropped (``overlong: drop``) or cut to its head, and dropped
when the cut leaves nothing to learn (over-long, not bad); a row that fits but carries no loss, or that was
rejected when it was built, is a problem the caller reports or fails on (``data.bad_rows``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from honing.data.chat.flat_examples import FlatExamples
from honing.data.prepared_rows import REJECTED
from honing.losses import IGNORE_INDEX

NO_TOKENS = "no_tokens"  # a problem's kind: the row fits but carries no loss
REJECTED_ROW = "rejected"  # ... or it was rejected when it was built (its reason is in the row)


@dataclass
class FittedRows:
    """The kept examples in order, their loss tokens (the first token of each is never predicted), the counts, and
    each problem row's index in ``table`` and kind, in the order the rows are used."""

    examples: FlatExamples
    loss_tokens: int
    truncated: int
    dropped: int
    problems: list[tuple[int, str]]


def fit_chat_rows(table: Any, indices: np.ndarray, seq_len: int, overlong: str) -> FittedRows:
    """The rows ``indices`` of ``table`` (columns ``status``, ``length``, ``input_ids``, ``labels``; repeats
    allowed) fitted to ``seq_len`` tokens under ``overlong`` (``truncate`` or ``drop``)."""
    indices = np.asarray(indices, dtype=np.int64)
    ids, offsets = table.ragged("input_ids")
    labels, _ = table.ragged("labels")
    built = table.column("status")[indices] != REJECTED
    length = table.column("length")[indices]
    start = offsets[indices]
    over = built & (length > seq_len)
    # a row that fits is stored whole; one that does not is stored cut at seq_len or more
    kept_length = np.minimum(offsets[indices + 1] - start, seq_len)
    trained = np.concatenate([[0], np.cumsum(labels != IGNORE_INDEX)])
    trainable = trained[start + kept_length] - trained[start]
    dropped = over if overlong == "drop" else over & (trainable == 0)
    no_tokens = built & ~over & (trainable == 0)
    kept = built & ~dropped & ~no_tokens
    problem = np.flatnonzero(~built | no_tokens)
    problems = [(int(indices[at]), NO_TOKENS if built[at] else REJECTED_ROW) for at in problem]
    first_trained = labels[start[kept]] != IGNORE_INDEX  # kept rows hold at least one token
    return FittedRows(
        examples=FlatExamples.gather(ids, labels, start[kept], kept_length[kept]),
        loss_tokens=int(trainable[kept].sum() - first_trained.sum()),
        truncated=int((over & ~dropped).sum()),
        dropped=int(dropped.sum()),
        problems=problems,
    )
