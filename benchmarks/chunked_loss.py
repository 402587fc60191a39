"""The chunked loss (``model.chunked_loss``, ``honing/chunked_ce.py``) against the full logits: peak memory and step
time of one training step at a Qwen-sized vocabulary, printed as ratios (targets: <= 0.5x memory, <= 1.05x time).

The same for both variants: a random Llama (hidden 256, 2 layers, fp32, sdpa, untied head, seed 0) with a
``--vocab`` (151,936) head, one row of ``--seq-len`` (4,096) random tokens whose every position carries a loss
(pretraining: the chunked loss's worst case; ``--target-fraction`` masks a prompt as SFT does), ``LMTrainModule``'s
``train_batch`` + ``optim_step`` with AdamW, ``--threads`` threads. Only ``chunked_loss`` differs.

Each measurement is a fresh subprocess running one variant alone; the variants alternate order round by round and
the median of the rounds is reported. Memory, on CPU: the process's peak RSS (``ru_maxrss``, imports, weights and
AdamW state included) and the peak over the RSS just before the first step (what the steps add); on CUDA:
``torch.cuda.max_memory_allocated``. Time: the median of the ``--steps`` timed steps after ``--warmup``, wall clock
(``step_s``) and the process's CPU time (``step_cpu_s``: steadier than the wall clock on a shared machine).

    .venv/bin/python benchmarks/chunked_loss.py [--vocab 151936] [--seq-len 4096] [--rounds 3] [--device cpu]
    .venv/bin/python benchmarks/chunked_loss.py --seq-len 256 --vocab 4096 --rounds 1   # a quick check
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, intermediate_size=688)
VARIANTS = ("plain", "chunked")


def measure(args: argparse.Namespace) -> dict[str, float]:
    """One variant's peak memory (MiB) and median step time (s), in this process."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from honing.methods.lm import LMTrainModule
    from honing.optim.param_groups import build_adamw

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    config = LlamaConfig(
        **MODEL, vocab_size=args.vocab, max_position_embeddings=args.seq_len, attn_implementation="sdpa"
    )
    model = LlamaForCausalLM(config).to(device)
    optimizer = build_adamw(model, lr=1e-4, weight_decay=0.0, betas=(0.9, 0.95), eps=1e-8)
    module = LMTrainModule(model, optimizer, micro_batch_size=1, device=device, chunked_loss=args.variant == "chunked")
    input_ids = torch.randint(0, args.vocab, (1, args.seq_len), generator=torch.Generator().manual_seed(0))
    labels = input_ids.clone()
    labels[:, : int(args.seq_len * (1 - args.target_fraction))] = -100
    batch = {"input_ids": input_ids, "labels": labels}
    process = __import__("psutil").Process()
    before = process.memory_info().rss / 2**20
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times, cpu_times = [], []
    for step in range(args.warmup + args.steps):
        started, cpu_started = time.perf_counter(), time.process_time()
        module.zero_grads()
        module.train_batch(batch)
        module.optim_step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if step >= args.warmup:
            times.append(time.perf_counter() - started)
            cpu_times.append(time.process_time() - cpu_started)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    values = {
        "step_s": statistics.median(times),
        "step_cpu_s": statistics.median(cpu_times),
        "peak_rss_mib": peak,
        "step_rss_mib": peak - before,
    }
    if device.type == "cuda":
        values["peak_cuda_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
    values["loss"] = float(module._step_loss)
    return values


def run_variant(args: argparse.Namespace, variant: str) -> dict[str, float]:
    """``measure`` in a fresh subprocess (so that one variant's peak never hides the other's)."""
    command = [sys.executable, os.path.abspath(__file__), "--variant", variant]
    for key in ("vocab", "seq_len", "target_fraction", "steps", "warmup", "threads", "device"):
        command += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    env["OMP_NUM_THREADS"] = str(args.threads)
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env)
    if result.returncode != 0:
        raise SystemExit(f"{variant} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    """Alternate the variants over rounds and print each one's medians and the chunked / plain ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--target-fraction", type=float, default=1.0, help="positions that carry a loss")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # one measurement, in a subprocess
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(measure(args)))
        return
    rounds: dict[str, list[dict[str, float]]] = {variant: [] for variant in VARIANTS}
    for index in range(args.rounds):
        for variant in VARIANTS if index % 2 == 0 else reversed(VARIANTS):
            rounds[variant].append(run_variant(args, variant))
    medians: dict[str, dict[str, Any]] = {
        variant: {key: statistics.median(r[key] for r in runs) for key in runs[0]} for variant, runs in rounds.items()
    }
    print(
        f"chunked loss vs full logits: vocab {args.vocab:,}, seq_len {args.seq_len:,}, "
        f"{args.target_fraction:.0%} of positions with a loss, hidden {MODEL['hidden_size']} x "
        f"{MODEL['num_hidden_layers']} layers, {args.device}, {args.threads} threads, {args.rounds} rounds "
        f"({platform.processor() or platform.machine()})"
    )
    for variant, values in medians.items():
        shown = ", ".join(f"{key} {value:.4g}" for key, value in values.items())
        print(f"  {variant:8s} {shown}")
    plain, chunked = medians["plain"], medians["chunked"]
    memory_keys = ["peak_cuda_mib"] if args.device.startswith("cuda") else ["peak_rss_mib", "step_rss_mib"]
    for key in memory_keys:
        print(f"  memory ratio ({key}): {chunked[key] / plain[key]:.3f}x (target <= 0.5x)")
    for key in ("step_s", "step_cpu_s"):
        print(f"  time ratio ({key}): {chunked[key] / plain[key]:.3f}x (target <= 1.05x)")
    print(f"  loss: plain {plain['loss']:.6f}, chunked {chunked['loss']:.6f}")


if __name__ == "__main__":
    main()
