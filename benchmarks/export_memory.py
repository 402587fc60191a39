"""The memory of a whole fine-tuning run, the end included: do the final checkpoint and the ``hf/`` export stay within
what the training steps needed?

    .venv/bin/python benchmarks/export_memory.py                          # LoRA, QLoRA, 2-process FSDP2 LoRA, ~0.75B
    .venv/bin/python benchmarks/export_memory.py --modes lora --layers 4   # a quick look

A Llama-shaped model (TinyLlama's ratios, hidden 2048, 14 layers: 0.75 B parameters, untied head) is saved once with
random weights in the run's dtype; each mode then runs ``honing train`` on it from that folder (LoRA rank 16 on every
linear; ``qlora`` on an NF4 base; ``fsdp2-lora`` in 2 processes under torchrun) for a few steps and exports at the
end as usual (``hf/`` merged, ``adapter/``). Another process samples each run process's resident set (``VmRSS``) and
its anonymous part (``RssAnon``: not the pages of the memory-mapped checkpoint) every 50 ms (glibc returning freed
blocks at once, as in benchmarks/memory.py, unless ``--glibc-default``), and watches
``metrics.jsonl`` (written every step) to split the run into the build (until step 1 is logged), the steps (from
step 1's line to the last step's: steps 2..N) and the end (final checkpoint, samples, export).

The targets (issue 37): the process peak <= 1.05x the training steps' peak, and QLoRA's anonymous peak over the
whole run <= 0.7x LoRA's.

``--modes qlora-load`` (not in the default modes) loads the saved model as QLoRA's build does, alone in a fresh
process, and checks issue 45's bound: the anonymous peak while loading (sampled every millisecond in the process, over
its baseline after a warm-up load) <= (the quantized model + the largest shard) x 1.2.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import yaml

sys.path.insert(0, os.path.dirname(__file__))
from memory import SMALL_FREES, llama_shape, native_precision  # noqa: E402  (the benchmarks' shared parts)

MODES = ("lora", "qlora", "fsdp2-lora")
LOAD_MODE = "qlora-load"  # the load alone (issue 45): opt-in
MIB = 2**20


def save_model(folder: str, hidden: int, layers: int, precision: str, shard_size: str | None = None) -> int:
    """A random Llama-shaped model saved to ``folder``; its parameter count."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    shape = {**llama_shape(hidden), "num_hidden_layers": layers}
    config = AutoConfig.for_model(shape.pop("model_type"), **shape)
    torch.manual_seed(0)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.save_pretrained(folder, **({"max_shard_size": shard_size} if shard_size else {}))
    return sum(param.numel() for param in model.parameters())


def run_config(mode: str, folder: str, model_dir: str, args: argparse.Namespace) -> dict:
    """The run of one mode: the saved model, LoRA on every linear, a few steps, the usual end-of-run export."""
    text = os.path.join(folder, "corpus.txt")
    with open(text, "w") as handle:  # any text: memory does not depend on the words
        handle.write(" ".join(f"word{i % 997}" for i in range(args.seq_len * 16)))
    model = {"name_or_path": model_dir, "lora": {"rank": 16, "alpha": 32, "target_modules": "all-linear"}}
    if mode == "qlora":
        model["quantize"] = "nf4"
    return {
        "method": "pretrain",
        "trainer": {
            "save_folder": os.path.join(folder, "run"),
            "precision": args.precision,
            "max_duration": f"{args.steps}steps",
            "metrics_collect_interval": 1,  # a metrics line per step: the phases' clock
        },
        "data": {
            "train": {"sources": [{"path": text}]},
            "seq_len": args.seq_len,
            "global_batch_size": 2 if mode == "fsdp2-lora" else 1,
            "cache_dir": os.path.join(folder, "cache"),
        },
        "tokenizer": {"kind": "byte"},
        "model": model,
        "optim": {"lr": 1e-4},
        "parallel": {"activation_checkpointing": "full"},
        "callbacks": {"evaluator": {"enabled": False}, "sample": {"enabled": False}},
    }


def status(pid: int) -> tuple[int, int]:
    """``(VmRSS, RssAnon)`` of a process in bytes; (0, 0) once it has gone."""
    values = {"VmRSS": 0, "RssAnon": 0}
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                key = line.split(":", 1)[0]
                if key in values:
                    values[key] = int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return values["VmRSS"], values["RssAnon"]


def descendants(pid: int) -> list[int]:
    """``pid`` and every process under it."""
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        try:
            with open(f"/proc/{current}/task/{current}/children") as handle:
                queue += [int(child) for child in handle.read().split()]
        except FileNotFoundError:
            pass
    return found


def steps_logged(metrics: str) -> int:
    """How many step lines ``metrics.jsonl`` holds so far."""
    try:
        with open(metrics) as handle:
            return sum(1 for line in handle if line.startswith('{"step"') or '"step"' in line)
    except FileNotFoundError:
        return 0


def measure(mode: str, model_dir: str, args: argparse.Namespace) -> dict:
    """Run one mode and sample it; the peaks of each phase per process (the largest process for FSDP2's ranks)."""
    with tempfile.TemporaryDirectory() as folder:
        config = os.path.join(folder, "run.yaml")
        with open(config, "w") as handle:
            yaml.safe_dump(run_config(mode, folder, model_dir, args), handle)
        command = [os.path.join(os.path.dirname(sys.executable), "honing"), "train", config]
        if mode == "fsdp2-lora":
            command += ["--nproc", "2"]
        # as benchmarks/memory.py: glibc hands freed blocks back at once, so a peak is what was live (by default it
        # keeps freed blocks under 32 MiB resident: --glibc-default measures that too)
        env = {**(os.environ if args.glibc_default else SMALL_FREES), "OMP_NUM_THREADS": str(args.threads)}
        started = time.monotonic()
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        metrics = os.path.join(folder, "run", "metrics.jsonl")
        samples: list[tuple[float, int, dict[int, tuple[int, int]]]] = []
        while process.poll() is None:
            per_process = {pid: status(pid) for pid in descendants(process.pid)}
            samples.append((time.monotonic() - started, steps_logged(metrics), per_process))
            time.sleep(0.05)
        output = process.stdout.read()
        if process.returncode != 0:
            raise SystemExit(f"{mode}: honing train failed (exit {process.returncode}):\n{output[-3000:]}")
        exported = sorted(os.listdir(os.path.join(folder, "run", "hf")))
    return summarize(mode, samples, args.steps, exported, time.monotonic() - started)


def summarize(mode: str, samples: list, steps: int, exported: list[str], seconds: float) -> dict:
    """Per process: the peak resident and anonymous bytes in the build, the steps and the end, and overall."""
    phases: dict[int, dict[str, list[int]]] = {}
    for _, logged, per_process in samples:
        phase = "build" if logged < 1 else "steps" if logged < steps else "end"
        for pid, (rss, anon) in per_process.items():
            peaks = phases.setdefault(pid, {name: [0, 0] for name in ("build", "steps", "end")})
            peaks[phase] = [max(peaks[phase][0], rss), max(peaks[phase][1], anon)]
    # the run's processes: those that ran steps with a model (torchrun's launcher stays small)
    workers = {pid: peaks for pid, peaks in phases.items() if peaks["steps"][0] > 512 * MIB}
    if not workers:
        raise SystemExit(f"{mode}: no process was sampled during the steps (too few steps for the 50 ms clock?)")
    pid = max(workers, key=lambda p: max(max(values) for values in workers[p].values()))
    peaks = workers[pid]
    overall = [max(peaks[name][index] for name in peaks) for index in (0, 1)]
    return {
        "mode": mode,
        "processes": len(workers),
        "build": peaks["build"],
        "steps": peaks["steps"],
        "end": peaks["end"],
        "overall": overall,
        "process_over_steps_rss": overall[0] / peaks["steps"][0],
        "process_over_steps_anon": overall[1] / peaks["steps"][1],
        "end_over_steps_rss": peaks["end"][0] / peaks["steps"][0],
        "end_over_steps_anon": peaks["end"][1] / peaks["steps"][1],
        "exported": exported,
        "seconds": seconds,
    }


# Run in a fresh process: QLoRA's load alone, its anonymous memory sampled every millisecond from a thread.
MEASURE_LOAD = """
import json, sys, threading, time
import torch
from honing.models.quantize import plain_parts
from honing.models.quantized_loading import load_quantized_pretrained
from transformers import LlamaConfig, LlamaForCausalLM

def anonymous():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("RssAnon:"))

def load(folder):
    return load_quantized_pretrained(folder, "nf4", attn_implementation="sdpa", dtype=getattr(torch, sys.argv[2]),
                                     trust_remote_code=False, auto_class=None, device=torch.device("cpu"), shards=1)

LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                             vocab_size=64)).save_pretrained(sys.argv[3])
load(sys.argv[3])  # a warm-up: imports and lazily built parts are the baseline, not the load's cost
baseline, peak, done = anonymous(), [0], threading.Event()

def sample():
    while not done.is_set():
        peak[0] = max(peak[0], anonymous())
        time.sleep(0.001)

sampler = threading.Thread(target=sample)
sampler.start()
started = time.monotonic()
model = load(sys.argv[1])
seconds = time.monotonic() - started
done.set()
sampler.join()
held = {id(t): t for t in [*model.parameters(), *model.buffers()]}.values()
model_bytes = sum(part.numel() * part.element_size() for tensor in held for part in plain_parts(tensor.detach()))
print(json.dumps({"baseline": baseline, "peak": max(peak[0], anonymous()), "model_bytes": model_bytes,
                  "seconds": seconds}))
"""


def measure_load(model_dir: str, args: argparse.Namespace) -> dict:
    """QLoRA's load of the saved model alone: its anonymous peak over the process's baseline, against issue 45's
    bound (the quantized model + the largest shard) x 1.2."""
    shards = [name for name in os.listdir(model_dir) if name.endswith(".safetensors")]
    largest = max(os.path.getsize(os.path.join(model_dir, name)) for name in shards)
    env = {**(os.environ if args.glibc_default else SMALL_FREES), "OMP_NUM_THREADS": str(args.threads)}
    dtype = "bfloat16" if args.precision == "bf16" else "float32"
    with tempfile.TemporaryDirectory() as warm_up:
        result = subprocess.run(
            [sys.executable, "-c", MEASURE_LOAD, model_dir, dtype, warm_up], capture_output=True, text=True, env=env
        )
    if result.returncode != 0:
        raise SystemExit(f"{LOAD_MODE}: the load failed:\n{result.stderr[-3000:]}")
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    bound = (measured["model_bytes"] + largest) * 1.2
    return {"mode": LOAD_MODE, "shards": len(shards), "largest_shard": largest, **measured, "bound": bound}


def mib(value: int) -> str:
    """``1,234 MiB``."""
    return f"{value / MIB:,.0f}"


def main() -> None:
    """Every mode in turn (never two at once), then the table and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=14)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--precision", default="auto", help="auto: bf16 where native (CUDA, AVX-512 BF16), else fp32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", help="write the figures here as well")
    parser.add_argument(
        "--checkpoint-precision",
        help="the saved model's dtype (default: the run's); bf16 with --precision fp32 makes loading convert weights",
    )
    parser.add_argument("--glibc-default", action="store_true", help="leave glibc's malloc thresholds as they are")
    parser.add_argument("--shard-size", help="the saved model's max_shard_size (default: transformers')")
    args = parser.parse_args()
    if args.precision == "auto":
        args.precision = native_precision("cpu")
    results = []
    with tempfile.TemporaryDirectory() as model_dir:
        saved = args.checkpoint_precision or args.precision
        params = save_model(model_dir, args.hidden, args.layers, saved, args.shard_size)
        print(
            f"model: {params / 1e9:.2f} B parameters ({args.hidden} x {args.layers}), saved in {saved}, run in "
            f"{args.precision}",
            flush=True,
        )
        for mode in args.modes.split(","):
            if mode == LOAD_MODE:
                loaded = measure_load(model_dir, args)
                print(json.dumps(loaded), flush=True)
                over = loaded["peak"] - loaded["baseline"]
                print(
                    f"{LOAD_MODE}: anonymous peak while loading {mib(over)} MiB over the baseline "
                    f"({mib(loaded['baseline'])} MiB); bound (quantized model {mib(loaded['model_bytes'])} + largest "
                    f"shard {mib(loaded['largest_shard'])}) x 1.2 = {mib(loaded['bound'])} MiB: "
                    f"{'met' if over <= loaded['bound'] else 'NOT met'}",
                    flush=True,
                )
                continue
            result = measure(mode, model_dir, args)
            results.append(result)
            print(json.dumps(result), flush=True)
    print("\nMiB per process (resident / anonymous):\n")
    print("| mode | build | training steps | end (checkpoint, export) | whole run | whole / steps (rss, anon) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in results:
        cells = [f"{mib(r[name][0])} / {mib(r[name][1])}" for name in ("build", "steps", "end", "overall")]
        ratios = f"{r['process_over_steps_rss']:.2f}, {r['process_over_steps_anon']:.2f}"
        print(f"| {r['mode']} | " + " | ".join(cells) + f" | {ratios} |")
    by_mode = {r["mode"]: r for r in results}
    for r in results:
        print(f"{r['mode']}: whole-run peak / training-steps peak = {r['process_over_steps_rss']:.2f} (target <= 1.05)")
    if "qlora" in by_mode and "lora" in by_mode:
        ratio = by_mode["qlora"]["overall"][1] / by_mode["lora"]["overall"][1]
        print(f"QLoRA / LoRA anonymous peak over the whole run: {ratio:.2f} (target <= 0.7)")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()
