"""What data preparation produced: examples, tokens, loss share, lengths, cuts, packing and images."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

MAX_REASONS = 5


@dataclass
class BadRowReport:
    """Rows skipped as bad: how many, the first few ``origin: reason`` lines, and the count per source path."""

    count: int = 0
    first_reasons: list[str] = field(default_factory=list)
    per_source: dict[str, int] = field(default_factory=dict)

    def add(self, source: str, origin: str, reason: str) -> None:
        """Count one bad row of ``source``."""
        self.count += 1
        self.per_source[source] = self.per_source.get(source, 0) + 1
        if len(self.first_reasons) < MAX_REASONS:
            self.first_reasons.append(f"{origin}: {reason}")

    def summary(self) -> str:
        """One line: the count, the count per source and the first reasons."""
        if not self.count:
            return "no bad rows"
        sources = ", ".join(f"{source}: {count}" for source, count in self.per_source.items())
        return f"skipped {self.count} bad row(s) ({sources}); first: " + "; ".join(self.first_reasons)


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
    # vision-language data only (empty otherwise): per kept example, and per image
    images_per_example: list[int] = field(default_factory=list)
    image_tokens: list[int] = field(default_factory=list)  # image tokens per example
    pixels_before: list[int] = field(default_factory=list)  # pixels per image as loaded
    pixels_after: list[int] = field(default_factory=list)  # pixels per image after the processor resized it

    @classmethod
    def merged(cls, reports: list[DataReport]) -> DataReport:
        """One split's report from its sources' reports (validation sources evaluated one by one)."""
        total = cls()
        for report in reports:
            for name in ("examples", "tokens", "loss_tokens", "truncated", "dropped", "rejected", "rows"):
                setattr(total, name, getattr(total, name) + getattr(report, name))
            for name in ("reasons", "lengths", "images_per_example", "image_tokens", "pixels_before", "pixels_after"):
                getattr(total, name).extend(getattr(report, name))
            total.row_length = max(total.row_length, report.row_length)
        total.reasons = total.reasons[:MAX_REASONS]
        packed = [report for report in reports if report.packing_efficiency is not None]
        if packed:  # real tokens over row slots, over every source's rows
            slots = sum(report.rows * report.row_length for report in packed)
            real = sum(report.packing_efficiency * report.rows * report.row_length for report in packed)
            total.packing_efficiency = real / slots if slots else None
        return total

    def add(self, length: int, loss_tokens: int) -> None:
        """Count one kept example."""
        self.examples += 1
        self.tokens += length
        self.loss_tokens += loss_tokens
        self.lengths.append(length)

    def add_images(
        self, count: int, image_tokens: int, pixels_before: Sequence[int], pixels_after: Sequence[int]
    ) -> None:
        """Count one kept example's images: how many, their tokens, and each one's pixels before and after resizing."""
        self.images_per_example.append(count)
        self.image_tokens.append(image_tokens)
        self.pixels_before.extend(pixels_before)
        self.pixels_after.extend(pixels_after)

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
        if self.images_per_example:
            line += f"; {sum(self.images_per_example):,} images, {sum(self.image_tokens):,} image tokens"
        return line + "".join(f"\n  {reason}" for reason in self.reasons)

    def _image_lines(self) -> list[str]:
        """Images per example, image tokens per example, and pixels per image before and after resizing."""
        if not self.images_per_example:
            return []
        lines = [
            f"  images per example: {_spread(self.images_per_example)}",
            f"  image tokens per example: {_spread(self.image_tokens)}",
        ]
        if self.pixels_before:
            lines.append(f"  pixels per image before resizing: {_spread(self.pixels_before)}")
        if self.pixels_after:
            lines.append(f"  pixels per image after resizing: {_spread(self.pixels_after)}")
        return lines

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
        lines += self._image_lines()
        if self.rows:
            packing = "" if self.packing_efficiency is None else f", packing efficiency {self.packing_efficiency:.1%}"
            lines.append(f"  rows: {self.rows:,} of {self.row_length} tokens{packing}")
        histogram = self.length_histogram()
        widest = max((count for _, _, count in histogram), default=1) or 1
        for low, high, count in histogram:
            span = f"{low}" if low == high else f"{low}-{high}"
            lines.append(f"  {span:>15} {count:>8,} {'#' * round(40 * count / widest)}")
        return "\n".join(lines)


def _spread(values: Sequence[int]) -> str:
    """``min A, mean B, max C`` of a non-empty list of counts."""
    array = np.asarray(values)
    return f"min {array.min():,}, mean {array.mean():,.1f}, max {array.max():,}"
