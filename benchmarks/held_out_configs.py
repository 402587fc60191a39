"""``honing convert`` over configs that users wrote (axolotl, LLaMA-Factory, TRL CLI, Oumi) in public repositories
nobody on this project looked at while writing the translators (issue 43, item 5).

The files are not in the repository (no license allows copying most of them): ``benchmarks/held_out_configs.json``
names each one by repository, path and commit, and ``--files`` is the folder that holds them, named by the manifest's
``file``. The manifest is split once by a fixed seed into a ``dev`` half (looked at, failures fixed) and a ``final``
half (run once, at the end).

Two figures per set. Lenient: translated and validated (``honing convert`` writes it), or refused in one line (a
``HoningError``) naming each key and why; a traceback fails, and so does "already a honing config" for a file of
another system (a wrong verdict). Strict: translated, or refused only for files the config names that this machine
lacks (the user's data, dataset_info.json, a DeepSpeed JSON): the file would translate on its author's machine.

    .venv/bin/python benchmarks/held_out_configs.py --set dev --files ../notes/held_out

``--root`` instead reads a set laid out as ``SYSTEM/dev/FILE`` and ``SYSTEM/final/FILE`` beside a ``sources.json``
that names each file's repository, path and commit (keyed by that relative path): the halves are its folders, split
once by seed when the set was collected (the second set, of Oumi and olmOCR configs, ../notes/held_out2).

    .venv/bin/python benchmarks/held_out_configs.py --set dev --root ../notes/held_out2

``held_out_training.py`` goes one step further on a ``--root`` set: each file that translates trains 3 steps on
local stand-ins (a tiny model of its family, generated rows), the share that trains beside the share that translates.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import traceback
from collections import Counter
from pathlib import Path

from honing.config import HoningError
from honing.interop.configs import convert_file

MANIFEST = Path(__file__).with_name("held_out_configs.json")
SPLIT_SEED = 43  # the number; fixed before any file was run
# refusals that name a file or folder the config points to and this machine lacks (the user's data, DeepSpeed JSON,
# dataset_info.json): on the user's machine the same file would get past them
ENVIRONMENT = re.compile(r"no such file|no dataset_info\.json|the names of the data sets to train on \(dataset_info|"
                         r"beside its data file")  # fmt: skip


def split(entries: list[dict]) -> dict[str, list[dict]]:
    """The manifest's entries in two halves, ``dev`` and ``final``, by a fixed seed."""
    order = sorted(entries, key=lambda entry: (entry["repo"], entry["path"]))
    random.Random(SPLIT_SEED).shuffle(order)
    half = len(order) // 2
    return {"dev": order[:half], "final": order[half:]}


def folder_halves(root: Path) -> dict[str, list[dict]]:
    """A ``--root`` set's entries by the half its folder names (``SYSTEM/dev/FILE``), from its ``sources.json``."""
    sources = json.loads((root / "sources.json").read_text())
    halves: dict[str, list[dict]] = {"dev": [], "final": []}
    for file, entry in sorted(sources.items()):
        halves[Path(file).parts[1]].append({**entry, "file": file})
    return halves


def verdict(path: Path) -> tuple[str, str]:
    """(``translated`` | ``refused`` | ``wrong verdict`` | ``traceback``, the one line) for one file."""
    try:
        convert_file(str(path))
    except HoningError as error:
        line = str(error).splitlines()[0] if str(error) else type(error).__name__
        if "already a honing config" in line:
            return "wrong verdict", line
        return "refused", line
    except Exception as error:  # a crash is what this measures: kept, not raised
        frame = traceback.extract_tb(error.__traceback__)[-1]
        return "traceback", f"{type(error).__name__}: {error} ({Path(frame.filename).name}:{frame.lineno})"
    return "translated", ""


def environment_only(line: str) -> bool:
    """True when every key a refusal names is refused for a file this machine lacks."""
    body = line.split("cannot honour: ", 1)[-1]
    return all(ENVIRONMENT.search(part) for part in re.split(r"; (?=[\w\[\]\.]+: )", body))


def main() -> None:
    """Run one half (or both) and print one line per file and the pass rate per system."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=["dev", "final", "all"], default="dev")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--files", help="the folder holding the manifest's files")
    where.add_argument("--root", help="a set with SYSTEM/{dev,final}/FILE and sources.json (instead of the manifest)")
    parser.add_argument("--json", help="write each file's verdict here")
    args = parser.parse_args()
    folder = Path(args.root or args.files)
    halves = folder_halves(folder) if args.root else split(json.loads(MANIFEST.read_text()))
    entries = halves["dev"] + halves["final"] if args.set == "all" else halves[args.set]
    results, passed, strict, translated, totals = [], Counter(), Counter(), Counter(), Counter()
    missing = [entry["file"] for entry in entries if not (folder / entry["file"]).is_file()]
    if missing:
        raise SystemExit(f"{folder}: {len(missing)} of the listed files are absent, e.g. {missing[0]}")
    for entry in entries:
        kind, line = verdict(folder / entry["file"])
        results.append({**entry, "verdict": kind, "line": line})
        totals[entry["system"]] += 1
        translated[entry["system"]] += kind == "translated"
        passed[entry["system"]] += kind in ("translated", "refused")
        strict[entry["system"]] += kind == "translated" or (kind == "refused" and environment_only(line))
        print(f"{kind:13} {entry['system']:12} {entry['repo']}/{entry['path']}  {line[:300]}")
    for system in sorted(totals):
        print(f"{system}: {translated[system]}/{totals[system]} translated, {passed[system]} one line or translated, "
              f"{strict[system]} translated or refused only for files this machine lacks")  # fmt: skip
    kinds = Counter(result["verdict"] for result in results)
    counts = ", ".join(f"{kind} {n}" for kind, n in kinds.items())
    print(f"{args.set}: {len(entries)} files, {sum(passed.values())} one line or translated, {sum(strict.values())} "
          f"translated or refused only for files this machine lacks; {counts}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
