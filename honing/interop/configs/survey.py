"""``honing convert`` over every YAML file under a folder: how many translate, how many are refused in one line,
how many fail with a traceback, and the refusal reasons by count (the first one of each file, and every one).

``python -m honing.interop.configs.survey FOLDER`` prints that table; the foreign-config tests assert it.
"""

from __future__ import annotations

import re
import sys
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from honing.config import ConfigError
from honing.interop.configs.convert import convert_file

REFUSED_PREFIX = "cannot honour: "


@dataclass
class Survey:
    """What ``honing convert`` made of each file of a folder."""

    translated: list[str] = field(default_factory=list)
    refused: dict[str, list[str]] = field(default_factory=dict)  # file -> its refusal lines
    tracebacks: dict[str, str] = field(default_factory=dict)  # file -> the last line of its traceback

    @property
    def total(self) -> int:
        """The number of files surveyed."""
        return len(self.translated) + len(self.refused) + len(self.tracebacks)

    def reasons(self, first_only: bool = True) -> Counter[str]:
        """Refusal lines by count (list indices folded, ``[0]`` -> ``[i]``): each file's first, or every one."""
        lines = [found[:1] if first_only else found for found in self.refused.values()]
        return Counter(re.sub(r"\[\d+\]", "[i]", line) for found in lines for line in found)


def refusal_lines(message: str) -> list[str]:
    """The refusal lines of ``honing convert``'s one-line error (``...; cannot honour: a: why; b: why``)."""
    body = message.split(REFUSED_PREFIX, 1)[1] if REFUSED_PREFIX in message else message
    # a line starts with a dotted key and a colon; a reason may itself hold "; "
    return [part for part in re.split(r"; (?=[\w.\[\]-]+: )", body) if part]


def survey(folder: str | Path) -> Survey:
    """Convert every ``*.yaml`` / ``*.yml`` under ``folder`` (nothing written) and record what came of each."""
    result = Survey()
    files = sorted(path for path in Path(folder).rglob("*") if path.suffix in (".yaml", ".yml") and path.is_file())
    for path in files:
        name = str(path)
        try:
            convert_file(name)
        except ConfigError as error:
            result.refused[name] = refusal_lines(str(error))
        except Exception:  # what this survey counts: every error that is not one line
            result.tracebacks[name] = traceback.format_exc().strip().splitlines()[-1]
        else:
            result.translated.append(name)
    return result


def report(result: Survey, folder: str) -> str:
    """The survey as text: the counts, then the reasons by count."""
    lines = [
        f"{folder}: {result.total} configs, {len(result.translated)} translated, {len(result.refused)} refused in "
        f"one line, {len(result.tracebacks)} tracebacks",
        "first refusal reason of each refused config:",
    ]
    lines += [f"  {count:3d}  {reason}" for reason, count in result.reasons().most_common()]
    lines += [f"  traceback  {name}: {last}" for name, last in result.tracebacks.items()]
    return "\n".join(lines)


if __name__ == "__main__":
    for argument in sys.argv[1:] or ["."]:
        print(report(survey(argument), argument))
