"""``docs/reference/oumi-verl-olmocr-keys.md`` is the Oumi, verl and olmOCR verdict tables as they are, and
``docs/coming-from.md`` gives their counts."""

from __future__ import annotations

from pathlib import Path

from honing.interop.configs.schema_keys_page import REGENERATE, page, summary

DOCS = Path(__file__).resolve().parents[3] / "docs"


def test_the_docs_page_is_the_tables():
    written = DOCS / "reference" / "oumi-verl-olmocr-keys.md"
    assert written.read_text(encoding="utf-8") == page(), f"regenerate: {REGENERATE}"


def test_coming_from_gives_the_counts_and_links_the_page():
    text = (DOCS / "coming-from.md").read_text(encoding="utf-8")
    assert "(reference/oumi-verl-olmocr-keys.md)" in text
    assert summary() in text, f"docs/coming-from.md's Oumi section: write {summary()!r}"
