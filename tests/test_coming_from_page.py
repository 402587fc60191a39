"""docs/coming-from.md is proven row by row (issue 35): every test a row names exists, every row names a test or says
why not (✗ / ~), a row that says ✓ or → always names one, and every honing key the Oumi and olmOCR rows name is a key
of honing's config."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "coming-from.md"
# tests/x/test_y.py or tests/x/test_y.py::test_name (a parametrized case's [id] is not part of the name)
REFERENCE = re.compile(r"(tests/[\w/]+\.py)(?:::(\w+))?")
PROVEN_SECTIONS = ("## Oumi", "## olmOCR", "## OLMo-core", "## VeOmni")
# the sections whose middle column names honing's config keys (``optim.lr``, ``callbacks.upload.save_path: ...``)
CONFIG_SECTIONS = ("## Oumi", "## olmOCR")


def sections(text: str) -> dict[str, list[str]]:
    """The page's table rows under each ``## `` heading (each table's header and separator rows left out)."""
    found: dict[str, list[str]] = {}
    heading = ""
    for line in text.splitlines():
        if line.startswith("## "):
            heading = line
            found[heading] = []
        elif heading and re.fullmatch(r"\|[\s|:-]+\|", line):
            found[heading].pop()  # the row above a separator is its table's header
        elif heading and line.startswith("|"):
            found[heading].append(line)
    return found


def defined_names(path: Path) -> set[str]:
    """The tests a test file defines, as pytest collects them: ``test_*`` functions at its top level or in a
    ``Test*`` class."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            found.add(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            found.add(node.name)
            found.update(item.name for item in node.body if isinstance(item, ast.FunctionDef))
    return found


def cells(row: str) -> list[str]:
    """A table row's cells (a cell's ``|`` inside backticks is not a border)."""
    return [cell.strip() for cell in re.split(r"\|(?=(?:[^`]*`[^`]*`)*[^`]*$)", row.strip().strip("|"))]


def test_every_test_the_page_names_exists():
    missing = []
    references = REFERENCE.findall(PAGE.read_text(encoding="utf-8"))
    assert len(references) >= 20  # the page names its tests
    for file, name in references:
        path = ROOT / file
        if not path.is_file():
            missing.append(file)
        elif name and name not in defined_names(path):
            missing.append(f"{file}::{name}")
    assert not missing, f"docs/coming-from.md names tests that do not exist: {missing}"


def test_every_row_of_the_proven_sections_names_its_test_or_says_why_not():
    rows = {heading: lines for heading, lines in sections(PAGE.read_text(encoding="utf-8")).items()}
    proven = {heading: lines for heading, lines in rows.items() if heading.startswith(PROVEN_SECTIONS)}
    assert len(proven) == len(PROVEN_SECTIONS) and all(proven.values())
    unproven = [
        row[:80]
        for lines in proven.values()
        for row in lines
        if not REFERENCE.search(row.rsplit("|", 2)[-2]) and not re.search(r"[✗~]", row.rsplit("|", 2)[-2])
    ]
    assert not unproven, f"rows with neither a test nor ✗ / ~ and a reason: {unproven}"


def test_a_row_that_says_present_or_translated_names_its_test():
    rows = sections(PAGE.read_text(encoding="utf-8"))
    unproven = [
        row[:80]
        for heading, lines in rows.items()
        if heading.startswith(PROVEN_SECTIONS)
        for row in lines
        if cells(row)[-1].startswith(("✓", "→")) and not REFERENCE.search(cells(row)[-1])
    ]
    assert not unproven, f"rows that say ✓ or → without naming the test that checks them: {unproven}"


def test_every_honing_key_the_oumi_and_olmocr_rows_name_is_a_config_key():
    from honing.config.schema import RunConfig
    from honing.interop.configs.translation import schema_has

    rows = sections(PAGE.read_text(encoding="utf-8"))
    named, unknown = [], []
    for heading, lines in rows.items():
        if not heading.startswith(CONFIG_SECTIONS):
            continue
        for row in lines:
            for token in re.findall(r"`([^`]+)`", cells(row)[1]):
                key = re.split(r"[:=\s]", token)[0].replace("[]", "").removesuffix(".*")
                if "." in key and key.split(".")[0] in RunConfig.model_fields:
                    named.append(key)
                    if not schema_has(key):
                        unknown.append(key)
    assert len(named) > 80  # the rows name honing's keys
    assert not unknown, f"the page names keys honing's config does not have: {unknown}"
