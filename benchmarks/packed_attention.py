"""Packed rows against length-grouped padded batches through honing's own SFT recipe, on real-length chat data
(the Alpaca demo, a BPE tokenizer trained here, ChatML, loss on the assistant's tokens): real (non-pad) tokens
per second of each and their ratio (issue 15, part 2).

What runs is `honing train` minus the console: `SFTRecipe.build()` on a config, so the attention kernel is the
one `model.attn_implementation: auto` picks. On CUDA, packed rows then take a varlen kernel (flash attention
when the `flash_attn` package is installed and the run is bf16, laid end to end one row per micro-batch; else
flex_attention's document block mask), so a packed row costs only its documents' own attention; padded
batches run sdpa. `--attn` adds packed variants with a named kernel (e.g. `sdpa`, to see what the varlen
kernel saves over the dense per-document mask). On CPU every variant runs sdpa, so there the ratio shows what
packing saves in padding alone.

Each measurement is a fresh subprocess run alone (never two timings at once); variants alternate order round
by round and the median of the rounds is reported. The clock runs from the end of warm-up step W to the end
of step W+N; tokens are the real tokens of those steps' batches (the collator's count).

    .venv/bin/python benchmarks/packed_attention.py                                  # CPU, small model
    .venv/bin/python benchmarks/packed_attention.py --device cuda --precision bf16-mixed --size 0.5b \\
        --max-length 2048 --attn sdpa
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from typing import Any

import common  # benchmarks/common.py: this folder is on sys.path when a script runs

DEFAULT_DATA = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "alpaca_demo", "alpaca_en_demo.json"
)
SIZES = {
    "small": dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
                  intermediate_size=512),
    # Qwen2.5-0.5B's shape (with the BPE vocabulary trained here)
    "0.5b": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                 intermediate_size=4864),
}  # fmt: skip


def config(args: dict[str, Any], folder: str, *, packed: bool, attn: str) -> Any:
    """The SFT run's validated config: packed rows of max_length, or padded length-grouped batches."""
    from honing.config import validate

    steps = args["warmup"] + args["steps"]
    return validate(
        {
            "method": "sft",
            "trainer": {
                "save_folder": folder,
                "max_duration": f"{steps}steps",
                "device": args["device"],
                "precision": args["precision"],
                "seed": 0,
            },
            "tokenizer": {"kind": "pretrained", "path": args["tokenizer"]},
            "data": {
                "train": {"sources": [{"path": args["data"], "format": "alpaca"}]},
                "chat_template": "chatml",
                "train_on": "assistant",
                "seq_len": args["max_length"],
                "packing": packed,
                "group_by_length": not packed,
                "overlong": "truncate",
                # packed: rows of max_length; padded: examples (rows that are one example each, ~max_length / 6)
                "global_batch_size": args["rows"] if packed else args["rows"] * args["examples_per_row"],
                "micro_batch_size": args["rows"] if packed else args["rows"] * args["examples_per_row"],
                "cache_dir": os.path.join(folder, "cache"),
            },
            "model": {"config": {"model_type": "llama", **SIZES[args["size"]]}, "attn_implementation": attn},
            "optim": {"lr": 2e-4, "weight_decay": 0.1, "grad_clip": 1.0},
            "scheduler": {"name": "constant", "warmup_steps": 0},
            "callbacks": {
                "checkpointer": {"save_interval": 10**6},
                "console": {"enabled": False},
                "sample": {"enabled": False},
            },
        }
    )


def measure(args: dict[str, Any], packed: bool, attn: str) -> dict[str, Any]:
    """One variant: build the recipe, count each step's real tokens, time the steps after warm-up."""
    import torch

    from honing.recipes.sft import SFTRecipe
    from honing.train import Callback

    warmup, steps = args["warmup"], args["steps"]
    times: dict[int, float] = {}
    tokens: list[int] = []

    class Timer(Callback):
        def on_step_end(self) -> None:
            if self.step in (warmup, warmup + steps):
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                times[self.step] = time.perf_counter()

    with tempfile.TemporaryDirectory() as folder:
        recipe = SFTRecipe(config(args, folder, packed=packed, attn=attn))
        trainer = recipe.build()
        trainer.add_callback("benchmark_timer", Timer())
        module = trainer.train_module
        train_batch = module.train_batch

        def counted(batch: dict[str, Any], dry_run: bool = False) -> None:
            tokens.append(recipe.collator.num_tokens(batch))
            train_batch(batch, dry_run)

        module.train_batch = counted
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        trainer.fit()
        peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None
        return {
            "tokens_per_s": sum(tokens[warmup : warmup + steps]) / (times[warmup + steps] - times[warmup]),
            "real_tokens_per_step": sum(tokens[warmup : warmup + steps]) / steps,
            "attention": recipe.models.describe_attention(),
            "peak_gib": peak,
        }


def variants(attns: list[str]) -> dict[str, tuple[bool, str]]:
    """Name → (packed, attn_implementation): packed with auto, packed with each named kernel, padded grouped."""
    chosen = {"packed (auto)": (True, "auto")}
    chosen.update({f"packed ({attn})": (True, attn) for attn in attns})
    chosen["padded grouped (auto)"] = (False, "auto")
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16-mixed", "bf16"])
    parser.add_argument("--size", default="small", choices=sorted(SIZES))
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--rows", type=int, default=4, help="packed rows of max-length per step")
    parser.add_argument("--examples-per-row", type=int, default=6, help="padded examples per packed row's worth")
    parser.add_argument("--attn", action="append", default=[], help="also packed with this kernel (repeatable)")
    parser.add_argument("--data", default=os.path.normpath(DEFAULT_DATA))
    args = parser.parse_args()
    args.data = os.path.abspath(args.data)
    if not os.path.isfile(args.data):
        sys.exit(f"--data {args.data}: no such file; expected the Alpaca demo JSON (alpaca_en_demo.json)")
    # one BPE tokenizer (4,096 tokens trained on the data's text, with ChatML's tokens) shared by every variant
    import sft_throughput

    tokenizer_folder = tempfile.TemporaryDirectory()
    sft_throughput.build_tokenizer(args.data).save_pretrained(tokenizer_folder.name)
    options = {key: getattr(args, key) for key in vars(args)} | {"tokenizer": tokenizer_folder.name}
    chosen = variants(args.attn)
    results: dict[str, list[float]] = {name: [] for name in chosen}
    last: dict[str, dict[str, Any]] = {}
    failures: dict[str, str] = {}
    started = time.perf_counter()
    for round_index in range(args.rounds):
        for name in chosen if round_index % 2 == 0 else list(reversed(chosen)):
            if name in failures:
                continue
            packed, attn = chosen[name]
            try:
                measured = common.measure_in_subprocess(
                    "packed_attention", f"b.measure({options!r}, {packed}, {attn!r})", threads=args.threads
                )
            except RuntimeError as error:
                failures[name] = str(error)
                print(f"round {round_index + 1} {name:24s} FAILED: {error}", flush=True)
                continue
            results[name].append(measured["tokens_per_s"])
            last[name] = measured
            print(f"round {round_index + 1} {name:24s} {measured['tokens_per_s']:11,.0f} real tokens/s", flush=True)
    median = {name: statistics.median(values) for name, values in results.items() if values}
    device = platform.processor() or platform.machine()
    if args.device == "cuda":
        import torch

        device = torch.cuda.get_device_name()
    print(
        f"\n{device}, {args.precision}, {args.size} model, max_length {args.max_length}, {args.steps} timed steps "
        f"after {args.warmup}, median of {args.rounds} rounds ({time.perf_counter() - started:.0f} s in all)"
    )
    for name in chosen:
        if name not in median:
            print(f"{name:24s} failed: {failures[name]}")
            continue
        info = last[name]
        peak = "" if info["peak_gib"] is None else f", peak {info['peak_gib']:.2f} GiB"
        print(
            f"{name:24s} {median[name]:11,.0f} real tokens/s ({info['real_tokens_per_step']:,.0f} a step{peak}); "
            f"attention {info['attention']}"
        )
    padded = median.get("padded grouped (auto)")
    ratios = {f"{name} / padded grouped": median[name] / padded for name in median if padded and name in chosen}
    for name, value in ratios.items():
        if not name.startswith("padded"):
            print(f"{name:44s} = {value:.3f}")
    print(json.dumps({"median_real_tokens_per_s": median, "ratios": ratios, "failures": failures, "args": options}))


if __name__ == "__main__":
    main()
