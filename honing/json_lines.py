"""Reading JSON Lines files (``metrics.jsonl``, prompt files): the one loop every reader of them shares."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any


def json_lines(path: str) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` of each non-blank line of ``path``. A line that is not JSON gives its
    ``json.JSONDecodeError`` as the value: the reader decides whether it ends the read (a user's file) or is passed
    over (a line of ``metrics.jsonl`` cut short when a run was killed)."""
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as error:
                value = error
            yield number, value
