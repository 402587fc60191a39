"""What data preparation produced: examples, tokens, loss share, lengths, cuts and packing."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

MAX_REASONS = 5


@dataclass
class DataReport:
    """Counts for one split, filled in while the data is prepared; printed before training and by ``honing data``."""

    examples: int = 0
    tokens: int = 0
    loss_tokens: int = 0
    truncated: int = 0
    dropped: int = 0
    rejected: int = 0
    reasons: list[str] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)  # tokens per example (after truncation)
    rows: int = 0
    row_length: int = 0
    packing_efficiency: float | None = None  # real tokens / row slots, when rows are packed

    def add(self, length: int, loss_tokens: int) -> None:
        """Count one kept example."""
        self.examples += 1
        self.tokens += length
        self.loss_tokens += loss_tokens
        self.lengths.append(length)

    def reject(self, reason: str) -> None:
        """Count a row that cannot be trained on; keep the first few reasons."""
        self.rejected += 1
        if len(self.reasons) < MAX_REASONS:
            self.reasons.append(reason)

    @property
    def loss_share(self) -> float:
        """The share of tokens that carry loss."""
        return self.loss_tokens / max(self.tokens, 1)

    def summary(self, split: str) -> str:
        """One line (plus the first rejection reasons) for the console."""
        line = (
            f"{split} data: {self.examples:,} examples, {self.tokens:,} tokens ({self.loss_share:.0%} with "
            f"loss); truncated {self.truncated}, dropped {self.dropped} over-long, rejected {self.rejected}"
        )
        return line + "".join(f"\n  {reason}" for reason in self.reasons)

    def length_histogram(self, bins: int = 10) -> list[tuple[int, int, int]]:
        """``(low, high, count)``: example lengths ``low..high`` (inclusive) in at most ``bins`` equal bins."""
        if not self.lengths:
            return []
        lengths = np.asarray(self.lengths)
        low, high = int(lengths.min()), int(lengths.max())
        width = -(-(high - low + 1) // bins)  # whole tokens per bin
        counts = np.bincount((lengths - low) // width)
        return [(low + i * width, min(low + (i + 1) * width - 1, high), int(count)) for i, count in enumerate(counts)]

    def text(self, split: str) -> str:
        """The full report of this split as text, with a length histogram drawn in characters."""
        lengths = np.asarray(self.lengths) if self.lengths else np.zeros(1, dtype=int)
        lines = [
            self.summary(split),
            f"  lengths: min {lengths.min()}, median {int(np.median(lengths))}, mean {lengths.mean():.1f}, "
            f"max {lengths.max()} tokens",
        ]
        if self.rows:
            packing = "" if self.packing_efficiency is None else f", packing efficiency {self.packing_efficiency:.1%}"
            lines.append(f"  rows: {self.rows:,} of {self.row_length} tokens{packing}")
        histogram = self.length_histogram()
        widest = max((count for _, _, count in histogram), default=1) or 1
        for low, high, count in histogram:
            span = f"{low}" if low == high else f"{low}-{high}"
            lines.append(f"  {span:>15} {count:>8,} {'#' * round(40 * count / widest)}")
        return "\n".join(lines)
