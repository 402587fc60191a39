"""The held-out configs that translate, trained 3 steps on local stand-ins (issue 43, item 5): for each file of a
``--root`` set's half, ``honing convert``, then the model, data and sizes this machine cannot have replaced
(``held_out_standins.py``: a tiny model of the named family, generated rows in the reader's columns, seq_len <= 512,
batch <= 8 rows), then ``honing train`` with ``trainer.hard_stop=3steps``, one torch thread, one run at a time.
A translated config that does not train is a finding: its line is the failure's first line.

    .venv/bin/python benchmarks/held_out_training.py --set dev --root ../notes/held_out2
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from held_out_configs import folder_halves, verdict  # noqa: E402
from held_out_standins import stand_in  # noqa: E402

from honing.interop.configs import convert_file  # noqa: E402

HONING = str(Path(sys.executable).with_name("honing"))
STEPS = 3


def failure_line(output: str) -> str:
    """The line that says why a run failed: honing's one-line error, or a traceback's last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        if line.startswith(("honing: error", "honing: rank")):
            return line
    return lines[-1] if lines else "(no output)"


def losses(folder: Path) -> list[float]:
    """``train/loss`` of each step logged in a run's metrics.jsonl (empty when there is none)."""
    metrics = folder / "metrics.jsonl"
    if not metrics.is_file():
        return []
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return [row["train/loss"] for row in rows if "train/loss" in row]


def train(path: Path, work: Path, models: Path, timeout: int) -> tuple[str, str, str]:
    """(``trained`` | ``failed``, the per-file line, the model's family verdict) for one translated file."""
    config = yaml.safe_load(convert_file(str(path)))
    config, notes, family = stand_in(config, work, models)
    written = work / "config.yaml"
    written.write_text(yaml.safe_dump(config, sort_keys=False))
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "disabled",
    }
    try:
        done = subprocess.run([HONING, "train", str(written)], capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "failed", f"timed out after {timeout} s; {'; '.join(notes)}", family
    seen = losses(work / "run")
    if done.returncode == 0 and len(seen) >= STEPS and all(math.isfinite(loss) for loss in seen):
        return "trained", f"losses {', '.join(f'{loss:.3g}' for loss in seen[:STEPS])}; {'; '.join(notes)}", family
    why = failure_line(done.stderr + done.stdout) if done.returncode else f"{len(seen)} finite losses logged"
    return "failed", f"{why[:300]}; {'; '.join(notes)}", family


def main() -> None:
    """Translate and train one half of a ``--root`` set; one line per file and the shares per system."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=["dev", "final", "all"], default="dev")
    parser.add_argument("--root", required=True, help="a set with SYSTEM/{dev,final}/FILE and sources.json")
    parser.add_argument("--only", default="", help="only files whose name holds this text")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per training run")
    parser.add_argument("--json", help="write each file's verdicts here")
    args = parser.parse_args()
    root = Path(args.root)
    halves = folder_halves(root)
    entries = halves["dev"] + halves["final"] if args.set == "all" else halves[args.set]
    entries = [entry for entry in entries if args.only in entry["file"]]
    totals, translated, trained, unknown = Counter(), Counter(), Counter(), Counter()
    results = []
    with tempfile.TemporaryDirectory(prefix="held_out_training-") as scratch:
        models = Path(scratch) / "models"
        for number, entry in enumerate(entries):
            system = entry["system"]
            totals[system] += 1
            kind, line = verdict(root / entry["file"])
            family = ""
            if kind == "translated":
                translated[system] += 1
                kind, line, family = train(root / entry["file"], Path(scratch) / str(number), models, args.timeout)
                trained[system] += kind == "trained"
                unknown[system] += kind == "trained" and family.startswith("unknown")
            results.append({**entry, "verdict": kind, "family": family, "line": line})
            print(f"{kind:11} {system:7} {entry['file']}  {line[:400]}", flush=True)
    for system in sorted(totals):
        print(f"{system}: {translated[system]}/{totals[system]} translated, {trained[system]}/{totals[system]} "
              f"trained {STEPS} steps on stand-ins ({trained[system]}/{translated[system] or 1} of those translated; "
              f"{unknown[system]} of them on a stand-in of another family, the named one unknown)")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
