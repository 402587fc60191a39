"""Scaling on one machine: tokens/s of 1 process × 2 threads against 2 processes × 1 thread under
torchrun (DDP and FSDP2), with the same model, data, global batch and seed; prints each median and
the ratios to the single process.

Each measurement is a fresh launch (one at a time: never two timings at once), the setups alternate
round by round, and the median of the rounds is reported. Throughput is timed on rank 0 between the
end of the warm-up steps and the end of the run; every step's collectives keep the ranks in step.

    .venv/bin/python benchmarks/scaling.py [--rounds 3] [--warmup 5] [--steps 30]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

from trainer_overhead import Rows  # the same token rows (this folder is on the path when run)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = 258  # byte-level: 256 bytes + the quickstart tokenizer's end-of-document and padding tokens
LR = 3e-3
# The quickstart's model and global batch.
SEQ_LEN, GLOBAL_BATCH = 256, 16
MODEL = dict(
    hidden_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=4,
    intermediate_size=512,
    vocab_size=VOCAB,
    max_position_embeddings=SEQ_LEN,
)
# name → (processes, threads per process, parallel strategy)
SETUPS = {
    "1 process x 2 threads": (1, 2, "none"),
    "2 processes x 1 thread, DDP": (2, 1, "ddp"),
    "2 processes x 1 thread, FSDP2": (2, 1, "fsdp"),
}


def worker(strategy: str, warmup: int, steps: int, out: str) -> None:
    """One process of a setup: honing's Trainer on the parallelised model; rank 0 writes tokens/s to ``out``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from honing.data.loader import DataLoader
    from honing.distributed import (
        get_rank,
        get_world_size,
        is_rank0,
        prepare_training_environment,
        teardown_training_environment,
    )
    from honing.methods.lm import LMTrainModule
    from honing.models.parallel import parallelize
    from honing.optim.param_groups import build_adamw
    from honing.parallel_dims import ParallelDims
    from honing.train import Callback, TrainerConfig
    from honing.train.callbacks.gc import GarbageCollectorCallback
    from honing.train.callbacks.metrics_file import MetricsFileCallback
    from honing.train.callbacks.speed_monitor import SpeedMonitorCallback

    class Timer(Callback):
        times: dict[int, float] = {}

        def on_step_end(self):
            if self.step in (warmup, warmup + steps):
                self.times[self.step] = time.perf_counter()

    prepare_training_environment(seed=0)
    try:
        model = LlamaForCausalLM(LlamaConfig(**MODEL, attn_implementation="sdpa"))
        dims = ParallelDims(world_size=get_world_size())
        dims.build_mesh("cpu")
        model = parallelize(model, strategy=strategy, dims=dims, device=torch.device("cpu"))
        data = torch.randint(0, VOCAB, (GLOBAL_BATCH * 64, SEQ_LEN), generator=torch.Generator().manual_seed(0))
        optimizer = build_adamw(model, lr=LR, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8)
        local_batch = GLOBAL_BATCH // get_world_size()
        module = LMTrainModule(
            model, optimizer, micro_batch_size=local_batch, grad_clip=1.0, scheduler={"name": "constant"}
        )
        loader = DataLoader(
            Rows(data),
            global_batch_size=GLOBAL_BATCH,
            seed=0,
            shuffle=False,
            rank=get_rank(),
            world_size=get_world_size(),
        )
        timer = Timer()
        with tempfile.TemporaryDirectory() as folder:
            TrainerConfig(
                save_folder=folder,
                max_duration=f"{warmup + steps}steps",
                metrics_collect_interval=10,
                callbacks={
                    "metrics_file": MetricsFileCallback(),
                    "timer": timer,
                    "speed_monitor": SpeedMonitorCallback(seq_len=SEQ_LEN),
                    "gc": GarbageCollectorCallback(interval=100),
                },
            ).build(module, loader).fit()
        if is_rank0():
            tokens_per_s = steps * GLOBAL_BATCH * SEQ_LEN / (timer.times[warmup + steps] - timer.times[warmup])
            with open(out, "w") as handle:
                json.dump({"tokens_per_s": tokens_per_s}, handle)
    finally:
        teardown_training_environment()


def measure(setup: str, warmup: int, steps: int) -> float:
    """Launch one setup in fresh processes and return its tokens/s."""
    processes, threads, strategy = SETUPS[setup]
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "result.json")
        script = [
            os.path.abspath(__file__),
            "--worker",
            strategy,
            "--warmup",
            str(warmup),
            "--steps",
            str(steps),
            "--out",
            out,
        ]
        if processes == 1:
            command = [sys.executable, *script]
        else:
            command = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc_per_node={processes}",
                *script,
            ]
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": REPO}
        subprocess.run(command, check=True, env=env, cwd=REPO, capture_output=True)
        with open(out) as handle:
            return json.load(handle)["tokens_per_s"]


def main() -> None:
    """Alternate the setups for ``--rounds`` rounds and print medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--worker", choices=["none", "ddp", "fsdp"], help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.warmup, args.steps, args.out)
        return
    results: dict[str, list[float]] = {setup: [] for setup in SETUPS}
    for round_index in range(args.rounds):
        for setup in SETUPS:
            results[setup].append(measure(setup, args.warmup, args.steps))
            print(f"round {round_index + 1}: {setup}: {results[setup][-1]:,.0f} tokens/s", flush=True)
    medians = {setup: statistics.median(values) for setup, values in results.items()}
    baseline = medians["1 process x 2 threads"]
    print(
        f"\nmachine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; model: quickstart "
        f"({MODEL['hidden_size']} hidden, {MODEL['num_hidden_layers']} layers); global batch "
        f"{GLOBAL_BATCH}x{SEQ_LEN}; {args.steps} timed steps after {args.warmup}; median of {args.rounds}"
    )
    for setup, median in medians.items():
        print(f"{setup:32s} {median:>10,.0f} tokens/s   ratio to 1 process: {median / baseline:.2f}")


if __name__ == "__main__":
    main()
