"""``honing data CONFIG``'s files: each split's data report (``honing.data.report.DataReport``) as text and as
length histograms. The CLI runs the config's own recipe up to its data step (the same sources, tokenizer, chat
template, truncation and packing), so what they report is what training gets."""

from __future__ import annotations

import os
from typing import Any

REPORT_TEXT = "data_report.txt"
REPORT_PNG = "data_report.png"


def draw_histograms(reports: dict[str, Any], path: str) -> str:
    """One length histogram per split into a PNG (matplotlib, Agg backend), and below it one of image tokens
    per example when the data has images."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    splits = [split for split, report in reports.items() if report.lengths]
    with_images = any(reports[split].image_tokens for split in splits)
    columns, rows = max(len(splits), 1), 2 if with_images else 1
    figure, axes = plt.subplots(rows, columns, figsize=(6 * columns, 4 * rows), squeeze=False)
    for axis, split in zip(axes[-1] if with_images else (), splits):
        report = reports[split]
        axis.hist(report.image_tokens or [0], bins=40, color="tab:green")
        axis.set_title(f"{split}: {sum(report.images_per_example):,} images")
        axis.set_xlabel("image tokens per example")
        axis.set_ylabel("examples")
    for axis, split in zip(axes[0], splits):
        report = reports[split]
        axis.hist(report.lengths, bins=40, color="tab:blue")
        if report.row_length:
            axis.axvline(report.row_length, color="tab:red", linestyle="--", label=f"row length {report.row_length}")
            axis.legend()
        axis.set_title(f"{split}: {report.examples:,} examples, {report.loss_share:.0%} of tokens with loss")
        axis.set_xlabel("tokens per example")
        axis.set_ylabel("examples")
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def write_data_report(reports: dict[str, Any], out_dir: str) -> tuple[str, str, str]:
    """Write the reports (split → DataReport) to ``data_report.txt`` and ``data_report.png`` in ``out_dir``;
    returns the text and both paths."""
    text = "\n\n".join(report.text(split) for split, report in reports.items()) + "\n"
    os.makedirs(out_dir, exist_ok=True)
    text_path = os.path.join(out_dir, REPORT_TEXT)
    with open(text_path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return text, text_path, draw_histograms(reports, os.path.join(out_dir, REPORT_PNG))
