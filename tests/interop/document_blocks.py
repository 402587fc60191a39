"""The code blocks of the documents in ``../shared/seeds`` (not part of the repository: the tests that read them skip
where it is absent), found in their text. The documents were saved as plain text: fences and, in Oumi's page, the
indentation are gone, so a block is found by its shape: Python from a ``def`` / ``class`` / ``from`` / ``@`` line to
the next line of prose; a row (``{`` ... its matching ``}``, strings skipped); a YAML config from a top-level
``model:`` / ``data:`` line to the next line of prose."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

SEEDS = Path(__file__).resolve().parents[2].parent / "shared" / "seeds"
CODE_START = re.compile(r"\s*(def |class |from \w|import |@dataclass)")
# prose: a capitalised word and a space ("The Trainer uses ...", "See ...", "Note: You ..."), or a heading ("...#")
PROSE = re.compile(r"\s*([A-Z][a-z]+:? |[A-Z][\w -]*#$|\d+\. )")
YAML_LINE = re.compile(r"(- )?[a-z_]+:( .*)?$|#")


def seed_text(prefix: str) -> str:
    """The text of the document whose file name starts with ``prefix``; the test skips where it is absent."""
    found = sorted(SEEDS.glob(f"{prefix}_*.txt"))
    if not found:
        pytest.skip(f"{SEEDS} holds no {prefix}_* document")
    return found[0].read_text(encoding="utf-8")


def python_blocks(text: str) -> list[str]:
    """Python blocks: from a line that starts code to the last code line before prose at or left of its
    indentation (a block under a numbered item is indented), dedented."""
    lines, blocks, i = text.splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        if not CODE_START.match(line):
            i += 1
            continue
        indent = len(line) - len(line.lstrip())
        end = i + 1
        while end < len(lines):
            current = lines[end]
            depth = len(current) - len(current.lstrip())
            if current.strip() and depth <= indent and PROSE.match(current):
                break
            end += 1
        blocks.append(textwrap.dedent("\n".join(lines[i:end])).strip())
        i = end
    return blocks


def matching_brace(text: str, start: int) -> int:
    """The index after the brace (or parenthesis) that closes the one at ``start``; quotes of both kinds skipped."""
    opening = text[start]
    closing = {"{": "}", "(": ")"}[opening]
    depth, quote, i = 0, None, start
    while i < len(text):
        char = text[i]
        if quote:
            if char == "\\":
                i += 1
            elif char == quote:
                quote = None
        elif char in "\"'":
            quote = char
        elif char == opening:
            depth += 1
        elif char == closing:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError(f"no closing {closing} for the one at {start}")


def oumi_blocks(text: str) -> list[tuple[str, str]]:
    """Oumi's page: ``(kind, text)`` for each row (``json``), Python block (``python``) and YAML config (``yaml``),
    in the page's order."""
    blocks: list[tuple[str, str]] = []
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    i = 0
    while i < len(lines):
        line = lines[i].rstrip("\n")
        if line == "{":
            end = matching_brace(text, offsets[i])
            blocks.append(("json", text[offsets[i] : end]))
            i = next(k for k in range(i, len(lines)) if offsets[k + 1] >= end) + 1
        elif line.startswith("from oumi"):
            start = text.index("(", offsets[i + 1])
            end = matching_brace(text, start)
            blocks.append(("python", text[offsets[i] : end]))
            i = next(k for k in range(i, len(lines)) if offsets[k + 1] >= end) + 1
        elif re.fullmatch(r"(model|data):", line) and i and not YAML_LINE.match(lines[i - 1]):
            end = i
            while end < len(lines) and (not lines[end].strip() or YAML_LINE.match(lines[end])):
                end += 1
            blocks.append(("yaml", "".join(lines[i:end]).strip()))
            i = end
        else:
            i += 1
    return blocks


def same_lines(held: str, found: str) -> bool:
    """Whether ``held`` (a block as the page shows it, indented) is ``found`` (the saved text's) line for line, but
    for the indentation the saved text lost."""
    strip = lambda block: [line.strip() for line in block.splitlines() if line.strip()]  # noqa: E731
    return strip(held) == strip(found)
