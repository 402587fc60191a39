"""Time to the first step of every example: ``honing train configs/NAME.yaml trainer.max_duration=1steps`` from a cold
start (a fresh process and a fresh cache folder), wall seconds from the process's start to its first step's line.

    python benchmarks/first_step_time.py                       # every configs/*.yaml
    python benchmarks/first_step_time.py --only dpo,sft-full   # some of them
    python benchmarks/first_step_time.py --warm                # and a second run on the cache the first one filled

An example that starts from another's output (LoRA from the quickstart's, GRPO from SFT's, the reward model from
SimPO's, grpo-tools from examples/tool_grpo.py's) gets that input from a 1-step run of the example that writes it,
made first and not timed; every path of the config under that example's folder is pointed at the stand-in's. The
target (issue 45): the first step within 60 s on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)
from common import OFFLINE, machine_summary  # noqa: E402

from honing.example_outputs import EXAMPLE_SCRIPTS, example_save_folders  # noqa: E402

#: the console's line after a step: "step 1/1 | loss ..."
FIRST_STEP = re.compile(r"^step 1(/\d+)? \|")
#: the example scripts' arguments for a stand-in run (the fewest steps they take)
SCRIPT_ARGUMENTS = {"examples/tool_grpo.py": ["--sft-steps", "1", "--grpo-steps", "1"]}


def honing_command() -> list[str]:
    """``honing`` as this interpreter runs it."""
    return [sys.executable, "-m", "honing"]


def prerequisites(raw: dict[str, Any], config: str) -> dict[str, str]:
    """The folders ``config`` reads that another example writes: folder prefix (``runs/sft-full``) → the example
    (``configs/sft-full.yaml`` or ``examples/tool_grpo.py``)."""
    writers = {folder: config for config, folder in example_save_folders().items()}
    writers.update(EXAMPLE_SCRIPTS)
    found: dict[str, str] = {}
    for value in strings(raw):
        for folder, writer in writers.items():
            if value.startswith(folder.rstrip("/") + "/") and os.path.abspath(writer) != os.path.abspath(config):
                found[folder.rstrip("/")] = writer
    return found


def strings(value: Any) -> list[str]:
    """Every string leaf of a YAML value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in strings(item)]
    return []


def redirected(raw: dict[str, Any], moves: dict[str, str], path: str = "") -> list[str]:
    """Dotted overrides that point every string under a moved folder at its new place (a list is overridden whole,
    as JSON)."""
    overrides = []
    for key, value in raw.items():
        dotted = f"{path}{key}"
        if isinstance(value, dict):
            overrides += redirected(value, moves, dotted + ".")
        elif isinstance(value, (str, list)) and strings(value) != strings(moved(value, moves)):
            new = moved(value, moves)
            overrides.append(f"{dotted}={new if isinstance(new, str) else json.dumps(new)}")
    return overrides


def moved(value: Any, moves: dict[str, str]) -> Any:
    """``value`` with each string's moved folder prefix replaced."""
    if isinstance(value, str):
        for old, new in moves.items():
            if value.startswith(old + "/"):
                return new + value[len(old) :]
        return value
    if isinstance(value, dict):
        return {key: moved(item, moves) for key, item in value.items()}
    if isinstance(value, list):
        return [moved(item, moves) for item in value]
    return value


class Bench:
    """Stand-ins made once per example, each config timed in its own save folder and cache."""

    def __init__(self, work: str, timeout: float):
        self.work, self.timeout = work, timeout
        self.stand_ins: dict[str, str] = {}  # example → the folder its 1-step run wrote (its save_folder's stand-in)

    def env(self, cache: str) -> dict[str, str]:
        """An offline environment with ``cache`` as honing's cache folder."""
        return {**os.environ, **OFFLINE, "HONING_CACHE_DIR": cache}

    def overrides_for(self, config: str) -> list[str]:
        """The overrides that point ``config``'s inputs at their stand-ins, made first where missing."""
        raw = read(config)
        moves = {folder: self.stand_in(writer) for folder, writer in prerequisites(raw, config).items()}
        return redirected(raw, moves)

    def stand_in(self, writer: str) -> str:
        """The folder that stands for ``writer``'s output: a 1-step run of that example, made once."""
        if writer in self.stand_ins:
            return self.stand_ins[writer]
        name = Path(writer).stem
        folder = os.path.join(self.work, "stand-ins", name)
        cache = os.path.join(self.work, "stand-in-cache")
        if writer.endswith(".py"):
            command = [sys.executable, writer, "--folder", folder, *SCRIPT_ARGUMENTS.get(writer, [])]
        else:
            command = [
                *honing_command(),
                "train",
                writer,
                *self.overrides_for(writer),
                f"trainer.save_folder={folder}",
                "trainer.max_duration=1steps",
            ]
        print(f"  stand-in for {os.path.relpath(writer, REPO)}: {' '.join(command[2:])}", flush=True)
        done = subprocess.run(command, cwd=REPO, env=self.env(cache), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"the stand-in run of {writer} failed:\n{tail(done.stdout + done.stderr)}")
        self.stand_ins[writer] = folder
        return folder

    def time_first_step(self, config: str, label: str, cache: str) -> dict[str, Any]:
        """Seconds from the start of ``honing train config trainer.max_duration=1steps`` to its first step's line,
        and to its exit."""
        folder = os.path.join(self.work, "runs", label)
        command = [
            *honing_command(),
            "train",
            config,
            *self.overrides_for(config),
            f"trainer.save_folder={folder}",
            "trainer.max_duration=1steps",
        ]
        started = time.perf_counter()
        process = subprocess.Popen(
            command,
            cwd=REPO,
            env=self.env(cache),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        first_step, lines = None, []
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if first_step is None and FIRST_STEP.match(line.strip()):
                first_step = time.perf_counter() - started
            if time.perf_counter() - started > self.timeout:
                process.kill()
                break
        code = process.wait()
        total = time.perf_counter() - started
        status = "ok" if code == 0 else f"exit {code}" if total <= self.timeout else "timed out"
        if code != 0:
            print(tail("".join(lines)), file=sys.stderr)
        return {"first_step_s": first_step, "total_s": total, "status": status}


def read(config: str) -> dict[str, Any]:
    """A config file's raw YAML."""
    with open(config, encoding="utf-8") as handle:
        return yaml.safe_load(handle) or {}


def tail(text: str, lines: int = 12) -> str:
    """The last ``lines`` lines of a run's output."""
    return "\n".join(text.strip().splitlines()[-lines:])


def main() -> int:
    """Time every example (or ``--only``), print the table, optionally write it as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated config names (default: every configs/*.yaml)")
    parser.add_argument("--warm", action="store_true", help="also time a second run on the cache the first filled")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds before a run is stopped")
    parser.add_argument("--target", type=float, default=60.0, help="seconds the first step should come within")
    parser.add_argument("--out", help="write the figures to this JSON file")
    parser.add_argument("--keep", action="store_true", help="keep the runs' folders (printed)")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or sorted(p.stem for p in Path(REPO, "configs").glob("*.yaml"))
    work = tempfile.mkdtemp(prefix="honing-first-step-")
    bench = Bench(work, args.timeout)
    results: dict[str, dict[str, Any]] = {}
    try:
        for name in names:
            config = os.path.join(REPO, "configs", f"{name}.yaml")
            print(f"{name}:", flush=True)
            bench.overrides_for(config)  # the stand-ins first, not timed
            cache = os.path.join(work, "cache", name)
            results[name] = {"cold": bench.time_first_step(config, name, cache)}
            if args.warm:
                results[name]["warm"] = bench.time_first_step(config, f"{name}-warm", cache)
            print(f"  {json.dumps(results[name])}", flush=True)
    finally:
        if args.keep:
            print(f"runs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(machine_summary())
    print(table(results, args.target))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump({"machine": machine_summary(), "results": results}, handle, indent=1)
    return 0


def table(results: dict[str, dict[str, Any]], target: float) -> str:
    """A Markdown table: each config's seconds to its first step and to its exit, cold (and warm)."""

    def seconds(value: float | None) -> str:
        return "no step line" if value is None else f"{value:.1f}"

    warm = any("warm" in row for row in results.values())
    columns = [
        "config",
        "first step, cold (s)",
        "exit, cold (s)",
        *(["first step, warm (s)"] if warm else []),
        "status",
    ]
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for name, row in results.items():
        cold = row["cold"]
        cells = [name, seconds(cold["first_step_s"]), f"{cold['total_s']:.1f}"]
        if warm:
            cells.append(seconds(row.get("warm", {}).get("first_step_s")))
        first = cold["first_step_s"]
        met = "" if first is None else (" (within target)" if first <= target else f" (over {target:.0f} s)")
        cells.append(cold["status"] + met)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
