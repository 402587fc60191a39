"""Time to the first training step of SFT on 100k generated conversations, 2 ranks (``honing train --nproc 2``):
every rank tokenizing in memory (``data.cache_rows: false``, how every fine-tuning run started before prepared
rows), the first run with the cache (local rank 0 prepares it with worker processes, the other rank waits), and a
run that reads the cache. Issue 24's target: the cached start at least 10x faster than the raw one.

Each run is a fresh ``honing train`` launch; a callback (``FirstStepClock``) writes the wall-clock time when step 1
ends and when the callbacks were built (right after the data), so the figures are launch → data ready and launch
→ first step. A fresh interpreter also times ``build_data`` alone (one process), raw and cached: the part of the
start the cache changes, without the launch, imports and model build every start pays. The generated
conversations are written once before any timing (every kind of run reads that file).

    .venv/bin/python benchmarks/prepare_once.py [--samples 100000] [--rounds 1]
    .venv/bin/python benchmarks/prepare_once.py --samples 2000  # a check
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from honing.train import Callback  # noqa: E402

CONFIG = """
method: sft
trainer: {{save_folder: {save_folder}, max_duration: 1steps, num_threads: 1}}
data:
  train: {{sources: [{{path: "generated:reverse?samples={samples}&seed=0"}}]}}
  chat_template: chatml
  seq_len: 512
  global_batch_size: 16
  cache_dir: {cache}
model:
  config: {{model_type: llama, hidden_size: 128, num_hidden_layers: 4, num_attention_heads: 4,
           num_key_value_heads: 4, intermediate_size: 512}}
callbacks:
  checkpointer: {{save_interval: 1000}}
  evaluator: {{enabled: false}}
  sample: {{enabled: false}}
  console: {{plain: true}}
  custom: [{{import_path: "benchmarks.prepare_once:FirstStepClock", kwargs: {{path: {clock}}}}}]
"""


class FirstStepClock(Callback):
    """Writes ``{"built": t, "first_step": t}`` (wall clock) to ``path`` on rank 0: when the callbacks were built
    (the data is ready then) and when step 1 ended."""

    def __init__(self, path: str):
        self.path = path
        self.built = time.time()

    def on_step_end(self) -> None:
        from honing.distributed import is_rank0

        if self.step == 1 and is_rank0():
            with open(self.path, "w", encoding="utf-8") as handle:
                json.dump({"built": self.built, "first_step": time.time()}, handle)


def launch(work: str, name: str, samples: int, *overrides: str) -> dict[str, float]:
    """One ``honing train --nproc 2`` run: seconds from launch to data ready and to the end of step 1."""
    clock = os.path.join(work, f"{name}.json")
    config = os.path.join(work, f"{name}.yaml")
    with open(config, "w", encoding="utf-8") as handle:
        handle.write(
            CONFIG.format(
                save_folder=os.path.join(work, name), samples=samples, cache=os.path.join(work, "cache"), clock=clock
            )
        )
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]),
    }
    started = time.time()
    completed = subprocess.run(
        [sys.executable, "-m", "honing", "train", config, "--nproc", "2", *overrides],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    if completed.returncode != 0:
        print(completed.stderr[-4000:], file=sys.stderr)
        raise RuntimeError(f"{name}: exit code {completed.returncode}")
    with open(clock, encoding="utf-8") as handle:
        times = json.load(handle)
    shutil.rmtree(os.path.join(work, name), ignore_errors=True)
    return {"data_ready": times["built"] - started, "first_step": times["first_step"] - started}


def data_phase(work: str, samples: int, *overrides: str) -> float:
    """Seconds one process spends building the data (``build_data``: rows, fitting, packing, the loader), in a
    fresh interpreter: what the cache changes, without the launch, imports and model that every start pays."""
    code = (
        "import sys, time, json; sys.path.insert(0, {repo!r}); import torch; torch.set_num_threads(1)\n"
        "from honing.config import load_config\nfrom honing.recipes import recipe_class\n"
        "config = load_config({config!r}, {overrides!r})\nrecipe = recipe_class(config.method)(config)\n"
        "assets = recipe.model_assets()\nstarted = time.perf_counter()\nrecipe.build_data(assets)\n"
        "print(json.dumps(time.perf_counter() - started))"
    ).format(repo=REPO, config=os.path.join(work, "first.yaml"), overrides=list(overrides))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO)
    if completed.returncode != 0:
        print(completed.stderr[-4000:], file=sys.stderr)
        raise RuntimeError(f"data phase: exit code {completed.returncode}")
    return float(completed.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=100_000, help="generated conversations (default 100,000)")
    parser.add_argument("--rounds", type=int, default=1, help="raw and cached runs each (median; default 1)")
    args = parser.parse_args()

    from benchmarks.common import machine_summary
    from honing.data.generated.tasks import materialize

    work = tempfile.mkdtemp(prefix="prepare-once-")
    try:
        materialize(f"generated:reverse?samples={args.samples}&seed=0", os.path.join(work, "cache"))
        raw = [launch(work, f"raw{i}", args.samples, "data.cache_rows=false") for i in range(args.rounds)]
        first = launch(work, "first", args.samples)
        cached = [launch(work, f"cached{i}", args.samples) for i in range(args.rounds)]
        phase_raw = statistics.median(
            data_phase(work, args.samples, "data.cache_rows=false") for _ in range(args.rounds)
        )
        phase_cached = statistics.median(data_phase(work, args.samples) for _ in range(args.rounds))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def median(runs: list[dict[str, float]], key: str) -> float:
        return statistics.median(run[key] for run in runs)

    print(machine_summary())
    print(f"{args.samples:,} generated conversations, SFT, 2 ranks (honing train --nproc 2), {args.rounds} round(s)")
    print("| start | launch → data ready | launch → step 1 done |")
    print("| --- | --- | --- |")
    for label, runs in (
        ("raw: every rank tokenizes in memory (data.cache_rows: false)", raw),
        ("first run: local rank 0 prepares the cache, the other waits", [first]),
        ("cached: the prepared rows read", cached),
    ):
        print(f"| {label} | {median(runs, 'data_ready'):.1f} s | {median(runs, 'first_step'):.1f} s |")
    print(f"one process, build_data alone: raw {phase_raw:.2f} s, cached {phase_cached:.2f} s")
    for name, ratio in (
        ("time to the first step", median(raw, "first_step") / median(cached, "first_step")),
        ("time to the data", median(raw, "data_ready") / median(cached, "data_ready")),
        ("build_data alone", phase_raw / phase_cached),
    ):
        print(f"raw / cached, {name}: {ratio:.1f}x (target >= 10x: {'met' if ratio >= 10 else 'not met'})")


if __name__ == "__main__":
    main()
