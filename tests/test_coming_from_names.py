"""Every name the OLMo-core and VeOmni documents give (``../shared/seeds``, not part of the repository: skipped where
absent) stands on docs/coming-from.md, in that document's section (issue 35: the page lists every name)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT.parent / "shared" / "seeds"
PAGE = ROOT / "docs" / "coming-from.md"
PROSE = {"Parameters", "Returns", "Return", "Raises", "Bases", "Tip", "Note", "Warning", "Example", "Type", "is"}


def seed(prefix: str) -> str:
    """The text of the document whose file name starts with ``prefix``."""
    found = sorted(SEEDS.glob(f"{prefix}_*.txt"))
    if not found:
        pytest.skip(f"{SEEDS} holds no {prefix}_* document")
    return found[0].read_text(encoding="utf-8")


def olmo_core_names(text: str) -> set[str]:
    """The API reference's names: ``olmo_core.train.X(...)`` entries, methods (``name(...)[source]``), fields and
    properties (``name: type``)."""
    names = set()
    for line in (line.strip() for line in text.splitlines()):
        if match := re.match(r"^(?:class\s+)?olmo_core\.train\.([\w.]+)", line):
            names.add(match.group(1).split(".")[-1])
        elif match := re.match(r"^([a-z_]\w*)\(.*\)\[source\]$", line):
            names.add(match.group(1))
        elif (match := re.match(r"^(?:property\s+)?([a-z_]\w*)\s*:\s*\S", line)) and match.group(1) not in PROSE:
            names.add(match.group(1))
    return names


def veomni_names(text: str) -> set[str]:
    """The names the VeOmni document's code uses: ``self.<attribute path>`` (its first and last parts), defined
    methods and classes, and the callback events."""
    names = set()
    for match in re.finditer(
        r"self\.([a-z_]+(?:\.[a-z_]+)*)|def ([a-z_]\w*)|class ([A-Za-z_]\w*)|\b(on_[a-z_]+)", text
    ):
        parts = next(group for group in match.groups() if group).split(".")
        names.update({parts[0], parts[-1]})  # self.args.train.freeze_vit: args and freeze_vit
    return names - PROSE


def section(heading: str) -> str:
    """The page's text under the ``## `` heading that starts with ``heading``, up to the next one."""
    page = PAGE.read_text(encoding="utf-8")
    start = page.index(f"## {heading}")
    end = page.find("\n## ", start + 1)
    return page[start : end if end != -1 else None]


def missing(names: set[str], text: str) -> list[str]:
    """The names (a dotted path: its last part) that ``text`` never writes as a word."""
    return sorted(name for name in names if not re.search(rf"\b{re.escape(name.split('.')[-1])}\b", text))


def test_every_olmo_core_name_is_on_the_page():
    names = olmo_core_names(seed("002"))
    assert len(names) > 60  # the extraction reads the API reference
    assert missing(names, section("OLMo-core")) == []


def test_every_veomni_name_is_on_the_page():
    names = veomni_names(seed("001"))
    assert {"BaseTrainer", "forward_backward_step", "on_step_begin", "freeze_vit"} <= names
    assert missing(names, section("VeOmni")) == []
