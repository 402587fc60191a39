"""docs/coming-from.md is proven row by row (issue 35): every test a row names exists, and every row of the sections
done so far (OLMo-core's, VeOmni's) names a test or says why not (✗ / ~)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "coming-from.md"
# tests/x/test_y.py or tests/x/test_y.py::test_name (a parametrized case's [id] is not part of the name)
REFERENCE = re.compile(r"(tests/[\w/]+\.py)(?:::(\w+))?")
PROVEN_SECTIONS = ("## OLMo-core", "## VeOmni")


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
    """The functions and classes a test file defines (at any depth)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.ClassDef)}


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
