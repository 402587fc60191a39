"""Trainer overhead: the same model, data, batch and seed trained by a hand-written torch loop,
by honing, and by the transformers Trainer; prints tokens/s of each and the ratios.

Each measurement is a fresh subprocess (one at a time: 2 cores, never two timings at once), the
systems alternate round by round, and the median of the rounds is reported.

    .venv/bin/python benchmarks/trainer_overhead.py [--rounds 3] [--steps 30] [--precision fp32]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

VOCAB = 258  # byte-level: 256 bytes + the quickstart tokenizer's end-of-document and padding tokens
LR = 3e-3
# "quickstart": the quickstart's model and batch, where compute dominates a step (~0.27 s).
# "tiny": a step of a few milliseconds, where whatever a trainer adds per step shows.
SIZES = {
    "quickstart": dict(
        seq_len=256, batch=16, hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=512
    ),
    "tiny": dict(
        seq_len=64, batch=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128
    ),
}
SIZE = SIZES[os.environ.get("HONING_BENCH_SIZE", "quickstart")]
SEQ_LEN, BATCH = SIZE["seq_len"], SIZE["batch"]
MODEL = dict(
    hidden_size=SIZE["hidden_size"],
    num_hidden_layers=SIZE["num_hidden_layers"],
    num_attention_heads=SIZE["num_attention_heads"],
    num_key_value_heads=SIZE["num_attention_heads"],
    intermediate_size=SIZE["intermediate_size"],
    vocab_size=VOCAB,
    max_position_embeddings=SEQ_LEN,
)


class Rows:
    """Token rows as a dataset both trainers accept: ``{"input_ids", "labels"}`` per row."""

    def __init__(self, data):
        self.data = data
        self.tokens_per_row = data.shape[1]

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        return {"input_ids": self.data[index], "labels": self.data[index]}


def build(seed: int):
    """The shared model (random init under ``seed``) and a fixed token dataset."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**MODEL, attn_implementation="sdpa"))
    generator = torch.Generator().manual_seed(seed)
    data = torch.randint(0, VOCAB, (BATCH * 64, SEQ_LEN), generator=generator)
    return model, data


def autocast(precision: str):
    import contextlib

    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16-mixed" else contextlib.nullcontext()


def timing(ends: list[float]) -> dict[str, float]:
    """From the end times of the warm-up's last step and every timed step: tokens/s over the whole
    window, and tokens/s at the median step time (which ignores the odd step another process
    interrupted; at millisecond steps those interruptions spread whole-window figures by ±25 %)."""
    durations = [later - earlier for earlier, later in zip(ends, ends[1:])]
    tokens = BATCH * SEQ_LEN
    return {
        "tokens_per_s": len(durations) * tokens / (ends[-1] - ends[0]),
        "median_step_tokens_per_s": tokens / statistics.median(durations),
    }


def run_hand_loop(warmup: int, steps: int, precision: str) -> float:
    """The minimal loop: forward, loss, backward, clip, fused AdamW step (the default of both trainers)."""
    import torch
    import torch.nn.functional as F

    model, data = build(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.1, betas=(0.9, 0.95), fused=True)
    model.train()
    ends = []
    for step in range(warmup + steps + 1):
        if step >= warmup:
            ends.append(time.perf_counter())  # the end of step ``step`` (numbered from 1 like the trainers')
        if step == warmup + steps:
            break
        batch = data[(step * BATCH) % len(data) :][:BATCH]
        with autocast(precision):
            logits = model(input_ids=batch, use_cache=False).logits
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB).float(), batch[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()  # a loop that never looks at its loss is not a realistic baseline
    return timing(ends)


def run_honing(warmup: int, steps: int, precision: str) -> float:
    """honing's Trainer with its default bookkeeping callbacks (metrics file, speed monitor, GC)."""
    import tempfile

    from honing.config.schema import TrainerSection
    from honing.data.loader import DataLoader
    from honing.methods.lm import LMTrainModule
    from honing.optim.param_groups import build_adamw
    from honing.train import Callback, Trainer
    from honing.train.callbacks.gc import GarbageCollectorCallback
    from honing.train.callbacks.metrics_file import MetricsFileCallback
    from honing.train.callbacks.speed_monitor import SpeedMonitorCallback

    class Timer(Callback):
        ends: list[float] = []

        def on_step_end(self):
            if warmup <= self.step <= warmup + steps:
                self.ends.append(time.perf_counter())

    model, data = build(0)
    optimizer = build_adamw(model, lr=LR, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8)
    module = LMTrainModule(
        model, optimizer, micro_batch_size=BATCH, grad_clip=1.0, precision=precision, scheduler={"name": "constant"}
    )
    loader = DataLoader(Rows(data), global_batch_size=BATCH, seed=0, shuffle=False)
    timer = Timer()
    with tempfile.TemporaryDirectory() as folder:
        Trainer(
            TrainerSection(save_folder=folder, max_duration=f"{warmup + steps}steps", metrics_collect_interval=10),
            train_module=module,
            data_loader=loader,
            callbacks={
                "metrics_file": MetricsFileCallback(),
                "timer": timer,
                "speed_monitor": SpeedMonitorCallback(seq_len=SEQ_LEN, precision=precision),
                "gc": GarbageCollectorCallback(interval=100),
            },
        ).fit()
    return timing(timer.ends)


def run_hf_trainer(warmup: int, steps: int, precision: str) -> float:
    """transformers.Trainer with the same model, data, batch, optimizer settings; no eval, no saves."""
    import tempfile

    from transformers import Trainer, TrainerCallback, TrainingArguments

    ends: list[float] = []

    class Timer(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if warmup <= state.global_step <= warmup + steps:
                ends.append(time.perf_counter())

    model, data = build(0)
    with tempfile.TemporaryDirectory() as folder:
        args = TrainingArguments(
            output_dir=folder,
            per_device_train_batch_size=BATCH,
            max_steps=warmup + steps,
            learning_rate=LR,
            weight_decay=0.1,
            adam_beta1=0.9,
            adam_beta2=0.95,
            max_grad_norm=1.0,
            lr_scheduler_type="constant",
            logging_steps=10,
            save_strategy="no",
            report_to=[],
            use_cpu=True,
            bf16=precision == "bf16-mixed",
            dataloader_num_workers=0,
            seed=0,
            disable_tqdm=True,
        )
        Trainer(model=model, args=args, train_dataset=Rows(data), callbacks=[Timer()]).train()
    return timing(ends)


SYSTEMS = {"hand-written loop": run_hand_loop, "honing": run_honing, "transformers Trainer": run_hf_trainer}


def measure_in_subprocess(system: str, args: argparse.Namespace) -> dict[str, float]:
    """Run one system in a fresh interpreter with the benchmark's thread count; return its ``timing``."""
    code = (
        f"import sys, json, torch; sys.path.insert(0, {os.path.dirname(__file__)!r}); "
        f"torch.set_num_threads({args.threads}); import trainer_overhead as b; "
        f"print(json.dumps(b.SYSTEMS[{system!r}]({args.warmup}, {args.steps}, {args.precision!r})))"
    )
    env = {**os.environ, "HONING_BENCH_SIZE": args.size}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"{system} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precision", choices=["fp32", "bf16-mixed"], default="fp32")
    parser.add_argument("--size", choices=sorted(SIZES), default="quickstart")
    parser.add_argument(
        "--systems", default=",".join(SYSTEMS), help="comma-separated systems to run (default: all three)"
    )
    args = parser.parse_args()
    systems = [name for name in SYSTEMS if name in args.systems.split(",")]

    results: dict[str, list[dict[str, float]]] = {name: [] for name in systems}
    for round_index in range(args.rounds):
        order = systems if round_index % 2 == 0 else list(reversed(systems))
        for system in order:
            timing_ = measure_in_subprocess(system, args)
            results[system].append(timing_)
            print(
                f"round {round_index + 1} {system:22s} {timing_['tokens_per_s']:10,.0f} tokens/s "
                f"({timing_['median_step_tokens_per_s']:,.0f} at the median step time)",
                flush=True,
            )

    size = SIZES[args.size]
    print(
        f"\n{platform.processor() or platform.machine()}, {args.threads} threads, precision {args.precision}, "
        f"size {args.size}: hidden {size['hidden_size']} x {size['num_hidden_layers']} layers, "
        f"{size['seq_len']} tokens x {size['batch']} rows, "
        f"{args.steps} timed steps after {args.warmup} warm-up, median of {args.rounds} rounds"
    )
    summary = {}
    for key, label in (
        ("tokens_per_s", "tokens/s over the timed steps"),
        ("median_step_tokens_per_s", "tokens/s at the median step time"),
    ):
        median = {name: statistics.median(r[key] for r in runs) for name, runs in results.items()}
        summary[key] = median
        print(f"\n{label}:")
        for name, value in median.items():
            print(f"  {name:22s} {value:10,.0f}")
        for other in ("hand-written loop", "transformers Trainer"):
            if "honing" in median and other in median:
                # the rounds are paired (one system right after the other): the median of their ratios is less
                # moved by the machine's speed drifting between rounds than the ratio of the medians
                paired = statistics.median(h[key] / o[key] for h, o in zip(results["honing"], results[other]))
                print(f"  honing / {other:20s} = {median['honing'] / median[other]:.3f} (paired rounds: {paired:.3f})")
    print(json.dumps({"median": summary, "args": vars(args)}))


if __name__ == "__main__":
    main()
