"""The core files of ``honing/`` whose code names another system (VeOmni, OLMo-core, Oumi, olmOCR, verl), issue 46
item 3: the core is every file of ``honing/`` outside ``honing/interop/`` and the CLI's own files (``honing/cli*.py``,
which dispatch to every surface). Code is read as ``architecture_numbers.code_only`` reads it: comments and string
literals (docstrings included) left out, so a name in prose does not count and an identifier or import does.

    python benchmarks/core_foreign_names.py [--tree PATH] [--json] [--strings]

``--strings`` also lists the core's string literals (documentation strings left out) that name one: config keys,
formats and messages, which the count above leaves out.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from architecture_numbers import REPO, code_only, python_files  # noqa: E402

#: each system and the spellings its name takes in code, matched case-insensitively
SYSTEMS = {
    "VeOmni": r"veomni",
    "OLMo-core": r"olmo[_-]?core",
    "Oumi": r"oumi",
    "olmOCR": r"olmocr",
    "verl": r"verl",
}

#: a name counts where a word part starts: after a non-letter (``is_verl_signature``, ``olmocr_rows``) or at a
#: capital (``VeOmniStep``, ``toVerl``), so English words holding the letters (``overlong``) do not
WORD_PART_START = r"(?:(?<![A-Za-z])|(?=[A-Z]))"


def is_core(relative: str) -> bool:
    """Whether a path under the tree (``honing/...``) is core: not interop's, not the CLI's."""
    parts = relative.split(os.sep)
    if parts[0] != "honing" or (len(parts) > 1 and parts[1] == "interop"):
        return False
    return not (len(parts) == 2 and parts[1].startswith("cli"))


def foreign_names(tree: str = REPO) -> dict[str, list[str]]:
    """Each core file whose code names another system → the systems it names."""
    found: dict[str, list[str]] = {}
    for path in python_files(os.path.join(tree, "honing")):
        relative = os.path.relpath(path, tree)
        if not is_core(relative):
            continue
        code = code_only(path)
        named = [system for system, pattern in SYSTEMS.items() if re.search(f"{WORD_PART_START}(?i:{pattern})", code)]
        if named:
            found[relative] = named
    return found


def foreign_strings(tree: str = REPO) -> dict[str, list[str]]:
    """Each core file → its string literals (docstrings left out) that name another system, as written."""
    pattern = re.compile(WORD_PART_START + "(?i:" + "|".join(SYSTEMS.values()) + ")")
    found: dict[str, list[str]] = {}
    for path in python_files(os.path.join(tree, "honing")):
        relative = os.path.relpath(path, tree)
        if not is_core(relative):
            continue
        with open(path, encoding="utf-8") as handle:
            module = ast.parse(handle.read())
        # a string standing alone as a statement is documentation: a module's, class's or function's docstring,
        # or a field's (pydantic sections document each field with the string below it)
        docstrings = {id(node.value) for node in ast.walk(module) if isinstance(node, ast.Expr)}
        strings = [
            node.value
            for node in ast.walk(module)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
        ]
        named = [text for text in strings if pattern.search(text)]
        if named:
            found[relative] = named
    return found


def main() -> None:
    """Print the count and the files (or JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", default=REPO, help="the repository's root (default: this one)")
    parser.add_argument("--json", action="store_true", help="print {file: [systems]} as JSON")
    parser.add_argument("--strings", action="store_true", help="also list the string literals naming one")
    args = parser.parse_args()
    found = foreign_names(args.tree)
    if args.json:
        print(json.dumps(found, indent=1))
        return
    print(f"core files naming another system in their code: {len(found)}")
    for path, systems in found.items():
        print(f"  {path}: {', '.join(systems)}")
    if args.strings:
        strings = foreign_strings(args.tree)
        print(f"core files with string literals (documentation left out) naming another system: {len(strings)}")
        for path, texts in strings.items():
            print(f"  {path}: {len(texts)}: " + "; ".join(repr(text[:60]) for text in texts[:4]))


if __name__ == "__main__":
    main()
