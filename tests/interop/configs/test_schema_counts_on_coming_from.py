"""docs/coming-from.md's counts of axolotl's, LLaMA-Factory's and TRL's schema keys per verdict are the verdict
tables' own (``benchmarks/coming_from_counts.py --write`` writes them): a table change that moves a number fails here
until the page is rewritten."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "benchmarks"))

import coming_from_counts  # noqa: E402
from architecture_page import block  # noqa: E402


def test_the_pages_schema_counts_are_the_verdict_tables():
    page = coming_from_counts.PAGE.read_text(encoding="utf-8")
    expected = coming_from_counts.generated_page(page)
    for name, *_ in coming_from_counts.BLOCKS:
        assert block(page, name) == block(expected, name), (
            f"docs/coming-from.md's {name} block is stale: run python benchmarks/coming_from_counts.py --write"
        )


def test_each_row_counts_every_key_of_its_group_once():
    for _, heading, verdicts, labels in coming_from_counts.BLOCKS:
        rows = coming_from_counts.table(heading, verdicts, labels).splitlines()[4:]
        for row, group in zip(rows, labels):
            keys, honoured, moot, refused = (int(cell) for cell in row.strip("|").split("|")[1:])
            assert keys == honoured + moot + refused == len(verdicts[group]) > 0
