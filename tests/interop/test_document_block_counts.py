"""docs/coming-from.md's count of the four documents' code blocks (issue 44 item 1): each document's table has a row
per block the tests find in its text (``../shared/seeds``, skipped where absent), and the summary table is the one
``benchmarks/coming_from_counts.py --write`` counts from those rows."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.interop.configs.test_oumi_document_blocks import KINDS
from tests.interop.document_blocks import oumi_blocks, python_blocks, seed_text
from tests.interop.test_olmo_core_document import code_blocks
from tests.interop.test_olmo_core_document import document as olmo_core_document
from tests.interop.test_veomni_document_blocks import FIRST_LINES

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import coming_from_counts  # noqa: E402
from architecture_page import block  # noqa: E402


def page() -> str:
    return coming_from_counts.PAGE.read_text(encoding="utf-8")


def test_the_summary_is_counted_from_the_documents_tables():
    name = coming_from_counts.DOCUMENT_BLOCKS
    assert block(page(), name) == block(coming_from_counts.generated_page(page()), name), (
        "docs/coming-from.md's block counts are stale: run python benchmarks/coming_from_counts.py --write"
    )


def test_each_documents_table_has_a_row_per_block_of_its_text():
    found = {
        "## olmOCR": len(python_blocks(seed_text("000"))) + len(oumi_blocks(seed_text("000"))),
        "## VeOmni": len(python_blocks(seed_text("001"))),
        "## OLMo-core": len(code_blocks(olmo_core_document())),
        "## Oumi": len(oumi_blocks(seed_text("003"))),
    }
    # what the block tests hold the documents to (each test runs every block it names)
    assert found == {"## olmOCR": 0, "## VeOmni": len(FIRST_LINES), "## OLMo-core": 1, "## Oumi": len(KINDS)}
    for heading, count in found.items():
        assert len(coming_from_counts.block_runs(page(), heading)) == count, heading
