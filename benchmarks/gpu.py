"""One accelerator, Llama-shaped models of Qwen2.5-0.5B's and Qwen2.5-1.5B's shapes at sequence 2,048: tokens/s,
MFU, peak memory and loss curves of honing at its defaults (and with switches, fp8 among them) against the
transformers ``Trainer``, TRL's ``SFTTrainer`` and a hand-written loop (issue 48).

Shared by every variant: a random Llama from a ``LlamaConfig`` (``--size 0.5b``: hidden 896 x 24 layers, 14 heads,
2 KV heads, MLP 4,864; ``1.5b``: hidden 1,536 x 28 layers, 12 heads, 2 KV heads, MLP 8,960; tied embeddings,
vocabulary 151,936, seed 0, sdpa), ``--batch`` rows of ``--seq-len`` tokens a step (``benchmarks/gpu_runners.py``:
the standard library's source as bytes by default, every position carrying a loss), AdamW (lr 3e-4, betas 0.9 /
0.95, eps 1e-8, decay 0.1; fused), clipping at 1.0, a constant LR, ``--precision`` (``bf16-mixed``: fp32 master
weights and optimizer under bf16 autocast; FSDP2 gathers the weights in bf16 and reduces gradients in fp32), FSDP2
on one device (a one-rank group; each decoder layer and then the root ``fully_shard``-ed), the loss read every 10
steps.

Variants (``--only NAME``, repeatable):
- ``honing``: ``LMTrainModule`` + ``Trainer`` at the defaults a config gets: ``parallel.compile: auto`` (on CUDA:
  each block compiled), the chunked loss (liger-kernel's fused linear cross-entropy where it is installed), FSDP2
  kept on one process (honing resolves ``fsdp`` there to ``none``; its sharded path is what every rank of a
  multi-GPU run executes);
- ``fp8``: those defaults at ``trainer.precision: fp8`` (torchao's float8 linear layers);
- ``no-liger``: the defaults where liger-kernel is not installed (the chunked loss's own chunks);
- ``no-compile``, ``ac``, ``no-chunked``: one switch flipped (``parallel.compile=false``,
  ``parallel.activation_checkpointing=full``, ``model.chunked_loss=false``);
- ``trainer``: ``transformers.Trainer`` (``optim=adamw_torch_fused``, ``bf16=True``) with FSDP2 through accelerate
  (``fsdp_config={"version": 2}``; unsharded on CPU); ``trl``: TRL's ``SFTTrainer`` the same way, at its defaults;
- ``hand``: a torchtitan-style loop: ``fully_shard`` by hand, forward, full-logits cross-entropy, backward, clip,
  step.

Each variant runs alone in a fresh interpreter (``common.measure_in_subprocess``), one after another. A step's end
is timed after a device sync; tokens/s is a step's tokens over the MEDIAN step time of the steps after
``--warmup`` (compilation stays in warm-up); ``honing`` and ``fp8`` run ``--curve-steps`` steps, so that their loss
curves can be compared (the fp8 target: within 1% of bf16's). MFU = FLOPs per token x tokens/s / the device's
dense bf16 peak (fp8 too, as torchtitan reports it), FLOPs per token by ``LMTrainModule.num_flops_per_token``:
6 x the matmul weights (the LM head's included) + 12 x layers x hidden x seq_len for attention. Peak memory:
``torch.cuda.max_memory_allocated`` over the timed steps (on CPU the process's peak RSS). A variant that fails is
reported with its error's last line and the rest go on; ``--budget-s`` skips what would not finish in time, and the
JSON is rewritten after every variant, so a run cut short keeps what it measured.

    python3 benchmarks/gpu.py --json benchmarks/results/gpu-h200.json        # the issue-48 plan, both sizes
    .venv/bin/python benchmarks/gpu.py --size tiny --device cpu --steps 5 --warmup 2 --curve-steps 10
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import sys
import time
from typing import Any

import common  # benchmarks/common.py: this folder is on sys.path when a script runs
from gpu_runners import LOG_EVERY, RUNNERS, Losses, model_config
from timed_steps import StepClock, free_port, join_one_rank_group

SIZES = {
    # Qwen2.5-0.5B's shape: ~494M parameters at its 151,936 vocabulary
    "0.5b": dict(hidden=896, layers=24, heads=14, kv_heads=2, mlp=4864, vocab=151_936, seq_len=2048, batch=8),
    # Qwen2.5-1.5B's shape: ~1.54B parameters
    "1.5b": dict(hidden=1536, layers=28, heads=12, kv_heads=2, mlp=8960, vocab=151_936, seq_len=2048, batch=8),
    # Qwen2.5-3B's shape: ~3.09B parameters (the fp8 comparison at the larger end of the 1.5B-3B)
    "3b": dict(hidden=2048, layers=36, heads=16, kv_heads=2, mlp=11008, vocab=151_936, seq_len=2048, batch=8),
    # the CPU smoke run: every variant end to end in seconds
    "tiny": dict(hidden=64, layers=2, heads=4, kv_heads=2, mlp=128, vocab=1024, seq_len=64, batch=2),
}
# name → (label, system, switches of that system's runner)
VARIANTS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "honing": ("honing (defaults)", "honing", {}),
    "fp8": ("honing, precision fp8", "honing", {"precision": "fp8"}),
    "fp8-ag": ("honing, fp8, float8 all-gather", "honing", {"precision": "fp8", "fp8_all_gather": True}),
    "no-liger": ("honing, no liger-kernel", "honing", {"liger": False}),
    "no-compile": ("honing, compile off", "honing", {"compile": False}),
    "ac": ("honing + activation ckpt", "honing", {"activation_checkpointing": "full"}),
    "no-chunked": ("honing, chunked loss off", "honing", {"chunked_loss": False}),
    "trainer": ("transformers Trainer", "trainer", {}),
    "trl": ("TRL SFTTrainer", "trl", {}),
    "hand": ("hand loop", "hand", {}),
}
#: the variants that run --curve-steps (their loss curves are compared with honing's: no-liger's gap is bf16's own
#: run-to-run floor, another kernel for the same loss)
CURVE_VARIANTS = ("honing", "fp8", "fp8-ag", "no-liger")
#: the issue-48 plan, most wanted first (a short lease measures the head of the list): (size, variant)
PLAN = [
    ("1.5b", "honing"), ("1.5b", "trainer"), ("0.5b", "honing"), ("0.5b", "trainer"), ("1.5b", "fp8"),
    ("1.5b", "trl"), ("0.5b", "trl"), ("1.5b", "hand"), ("0.5b", "hand"), ("1.5b", "no-liger"),
]  # fmt: skip
TARGETS = "defaults >= 1.3x the Trainer at both sizes, MFU >= 40% at the larger, peak memory <= the Trainer's"


def measure(variant: str, settings: dict[str, Any]) -> dict[str, Any]:
    """Run ``variant`` in this process: its timing, peak memory and losses, the device's name and peak FLOP/s."""
    import torch
    import torch.distributed as dist

    from honing.train.peak_flops import cpu_model_name, peak_flops
    from honing.train.precision import emulates_bf16

    _, system, switches = VARIANTS[variant]
    device = torch.device("cuda", 0) if settings["device"] == "cuda" else torch.device(settings["device"])
    if system not in ("trainer", "trl") or device.type == "cuda":  # those join the group through accelerate
        join_one_rank_group(device, settings["port"], init=system not in ("trainer", "trl"))
    clock, losses = StepClock(device, settings["warmup"], settings["steps"]), Losses()
    try:
        facts = RUNNERS[system](settings, device, clock, losses, **switches)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    result = {**clock.result(settings["batch"] * settings["seq_len"]), **facts, "losses": losses.points}
    # bf16 that a CPU only emulates has no honest peak (honing's speed monitor records no MFU there either)
    emulated = emulates_bf16(device, settings["precision"])
    result["peak_flops"] = None if emulated else peak_flops(device, settings["precision"])
    result["device"] = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model_name()
    result["torch"] = torch.__version__
    return result


# --- the driver ----------------------------------------------------------------------------------------------
def model_flops(settings: dict[str, Any]) -> tuple[float, int]:
    """FLOPs per token (honing's formula, see the module docstring) and the parameter count, from a meta model."""
    import torch
    from transformers import LlamaForCausalLM

    from honing.methods.lm import LMTrainModule

    with torch.device("meta"):
        model = LlamaForCausalLM(model_config(settings))
    params = sum(p.numel() for p in model.parameters())  # a tied head is counted once
    module = LMTrainModule(model, None, micro_batch_size=1)  # type: ignore[arg-type]  # only its FLOPs are read
    return float(module.num_flops_per_token(settings["seq_len"])), params


def ratio(results: dict[str, dict[str, Any]], variant: str, baseline: str) -> float | None:
    """tokens/s of ``variant`` over ``baseline``'s, or None when either failed or was not run."""
    if "tokens_per_s" not in results.get(variant, {}) or "tokens_per_s" not in results.get(baseline, {}):
        return None
    return results[variant]["tokens_per_s"] / results[baseline]["tokens_per_s"]


def curve_gap(
    results: dict[str, dict[str, Any]], variant: str, baseline: str = "honing", *, after: int = 0, window: int = 1
) -> float | None:
    """The largest relative difference of ``variant``'s losses from ``baseline``'s: at each step after ``after``
    (``window`` 1), or between the means of consecutive ``window``-step spans after ``after``."""
    if "losses" not in results.get(variant, {}) or "losses" not in results.get(baseline, {}):
        return None
    base = dict((int(step), loss) for step, loss in results[baseline]["losses"])
    mine = dict((int(step), loss) for step, loss in results[variant]["losses"])
    steps = sorted(step for step in mine if step in base and step > after)
    spans = [steps[i : i + window] for i in range(0, len(steps) - window + 1, window)]
    gaps = [abs(sum(mine[s] for s in span) - sum(base[s] for s in span)) / sum(base[s] for s in span) for span in spans]
    return max(gaps) if gaps else None


def table(size: str, params: int, results: dict[str, dict[str, Any]], memory: str) -> list[str]:
    """One markdown row per variant of one size."""
    rows = []
    for variant, result in results.items():
        name, _, repeat = variant.partition("#")
        label = VARIANTS[name][0] + (f" (run {repeat})" if repeat else "")
        label += "" if result.get("fsdp2", True) else " (unsharded)"
        if "error" in result:
            rows.append(f"| {size} | {params / 1e6:,.0f}M | {label} | {result['error']} | | | | | |")
            continue
        mfu = "n/a" if result["mfu"] is None else f"{result['mfu']:.1%}"
        shown = [
            f"{value:.3f}" if value is not None else "n/a"
            for value in (ratio(results, variant, "trainer"), ratio(results, variant, "hand"))
        ]
        last = f"{result['losses'][-1][1]:.3f} @ {result['losses'][-1][0]:.0f}" if result.get("losses") else "n/a"
        rows.append(
            f"| {size} | {params / 1e6:,.0f}M | {label} | {result['tokens_per_s']:,.0f} | {mfu} | "
            f"{result['peak_memory_mib']:,.0f} {memory} | {shown[0]} | {shown[1]} | {last} |"
        )
    return rows


def size_summary(params: int, results: dict[str, dict[str, Any]], lr_warmup: int = 0) -> dict[str, Any]:
    """The JSON's per-size keys the issue names, and the ratios and checks behind its targets."""
    honing, trainer = results.get("honing", {}), results.get("trainer", {})
    summary = {
        "params": params,
        "honing_default_tokens_per_s": honing.get("tokens_per_s"),
        "trainer_tokens_per_s": trainer.get("tokens_per_s"),
        "honing_default_mfu": honing.get("mfu"),
        "honing_vs_trainer": ratio(results, "honing", "trainer"),
        "honing_vs_trl": ratio(results, "honing", "trl"),
        "honing_vs_hand": ratio(results, "honing", "hand"),
        "honing_peak_mib": honing.get("peak_memory_mib"),
        "trainer_peak_mib": trainer.get("peak_memory_mib"),
    }
    repeats = sorted(key.partition("#")[2] for key in results if key.startswith("honing#"))
    if repeats:  # honing and the Trainer measured again later in the same lease: every pair's ratio
        pairs = [("honing", "trainer")] + [(f"honing#{k}", f"trainer#{k}") for k in repeats]
        summary["honing_vs_trainer_runs"] = [ratio(results, mine, theirs) for mine, theirs in pairs]
    for variant in ("fp8", "fp8-ag", "no-liger"):
        if variant in results:
            key = variant.replace("-", "_")
            summary[f"{key}_vs_bf16"] = ratio(results, variant, "honing")
            summary[f"{key}_loss_curve_max_gap"] = curve_gap(results, variant)
            summary[f"{key}_loss_curve_max_gap_after_warmup"] = curve_gap(results, variant, after=lr_warmup)
            summary[f"{key}_loss_10_step_means_max_gap"] = curve_gap(results, variant, after=lr_warmup, window=10)
    return summary


def target_lines(size: str, summary: dict[str, Any], larger: bool) -> list[str]:
    """Whether honing's defaults met the issue's targets at this size."""
    checks = []
    speed = summary["honing_vs_trainer"]
    if speed is not None:
        checks.append(f"{speed:.3f}x the Trainer ({'met' if speed >= 1.3 else 'NOT met'}, >= 1.3)")
    if larger and summary["honing_default_mfu"] is not None:
        mfu = summary["honing_default_mfu"]
        checks.append(f"MFU {mfu:.1%} ({'met' if mfu >= 0.40 else 'NOT met'}, >= 40%)")
    if summary["honing_peak_mib"] is not None and summary["trainer_peak_mib"] is not None:
        fits = summary["honing_peak_mib"] <= summary["trainer_peak_mib"]
        checks.append(
            f"peak {summary['honing_peak_mib']:,.0f} vs {summary['trainer_peak_mib']:,.0f} MiB "
            f"({'met' if fits else 'NOT met'})"
        )
    for key in ("fp8", "fp8_ag"):
        if summary.get(f"{key}_vs_bf16") is None:
            continue
        fp8, gap = summary[f"{key}_vs_bf16"], summary[f"{key}_loss_curve_max_gap"]
        checks.append(f"{key} {fp8:.3f}x bf16 ({'met' if fp8 >= 1.2 else 'NOT met'}, >= 1.2)")
        if gap is not None:
            means = summary[f"{key}_loss_10_step_means_max_gap"]
            checks.append(
                f"{key} loss within {gap:.2%} of bf16's at every step ({'met' if gap <= 0.01 else 'NOT met'}, <= 1%)"
                + ("" if means is None else f", {means:.2%} over 10-step means after the LR warmup")
            )
    floor = summary.get("no_liger_loss_curve_max_gap")
    if floor is not None:
        checks.append(f"bf16's own floor (another loss kernel): {floor:.2%} at a step")
    return [f"- {size}: " + "; ".join(checks or ["nothing to compare"])]


def versions() -> dict[str, str | None]:
    """The versions of the packages the figures depend on (None: not installed)."""
    found: dict[str, str | None] = {}
    for name in ("torch", "transformers", "trl", "accelerate", "liger-kernel", "torchao", "triton", "flash-attn"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def main() -> None:
    """Run the plan (or the chosen sizes and variants), one subprocess at a time; print the tables; write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), action="append", help="repeatable (default: the plan)")
    parser.add_argument("--seq-len", type=int, help="default: the size's (2,048; 64 for tiny)")
    parser.add_argument("--batch", type=int, help="rows a step, one micro-batch; default: the size's (8; 2 for tiny)")
    parser.add_argument("--steps", type=int, default=15, help="timed steps")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first (compile happens here)")
    parser.add_argument("--curve-steps", type=int, default=50, help="steps of the honing and fp8 runs (loss curves)")
    parser.add_argument("--lr-warmup", type=int, default=10, help="steps of linear LR warmup (every system)")
    parser.add_argument(
        "--run", action="append", metavar="SIZE:VARIANT", help="a run of the plan, in order (repeatable)"
    )
    parser.add_argument("--precision", choices=["bf16-mixed", "bf16", "fp32"], default="bf16-mixed")
    parser.add_argument("--data", choices=["bytes", "random"], default="bytes")
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when there is one")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads in each run")
    parser.add_argument("--only", action="append", choices=list(VARIANTS), help="a variant to run (repeatable)")
    parser.add_argument("--budget-s", type=float, default=0, help="skip variants that would start after this")
    parser.add_argument("--json", help="write the raw results here (rewritten after every variant)")
    args = parser.parse_args()
    if args.warmup < 1 or args.steps < 1:
        parser.error("--warmup and --steps must be >= 1 (the clock starts at the end of the last warm-up step)")
    import torch  # after parsing: --help stays quick

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.run:
        plan = [tuple(item.split(":", 1)) for item in args.run]
        unknown = [item for item, (size, name) in zip(args.run, plan) if size not in SIZES or name not in VARIANTS]
        if unknown:
            parser.error(f"--run {unknown[0]}: expected SIZE:VARIANT of {sorted(SIZES)} and {list(VARIANTS)}")
    elif args.size or args.only:
        sizes = args.size or ["0.5b"]
        plan = [(size, name) for size in sizes for name in VARIANTS if not args.only or name in args.only]
    else:
        plan = PLAN
    command = " ".join(["python3", "benchmarks/gpu.py", *sys.argv[1:]])
    memory = "MiB allocated" if device == "cuda" else "MiB RSS"
    everything: dict[str, Any] = {
        "command": command, "date": datetime.date.today().isoformat(), "device": device, "machine": platform.machine(),
        "versions": versions(), "args": vars(args), "sizes": {}, "results": {},
    }  # fmt: skip
    started = time.perf_counter()
    results: dict[str, dict[str, dict[str, Any]]] = {}
    facts: dict[str, tuple[float, int]] = {}
    for size, variant in plan:
        shape = SIZES[size]
        base = dict(
            size=size, shape=shape, vocab=shape["vocab"], seq_len=args.seq_len or shape["seq_len"],
            batch=args.batch or shape["batch"], warmup=args.warmup, precision=args.precision, device=device,
            data=args.data, lr_warmup=args.lr_warmup,
        )  # fmt: skip
        if size not in facts:
            facts[size] = model_flops(base)
            print(f"\n{size}: {facts[size][1]:,} parameters, {facts[size][0] / 1e9:.3f} GFLOP per token", flush=True)
        flops_per_token, params = facts[size]
        total = (
            max(args.curve_steps, args.warmup + args.steps) if variant in CURVE_VARIANTS else args.warmup + args.steps
        )
        settings = {**base, "steps": total - args.warmup, "total_steps": total, "port": free_port()}
        elapsed = time.perf_counter() - started
        outcome = results.setdefault(size, {})
        if variant in outcome:  # a repeated run keeps every measurement: the second is "<variant>#2"
            variant_key = f"{variant}#{sum(1 for key in outcome if key.split('#')[0] == variant) + 1}"
        else:
            variant_key = variant
        if args.budget_s and elapsed > args.budget_s:
            outcome[variant_key] = {"error": f"skipped: {elapsed:.0f} s of the {args.budget_s:.0f} s budget spent"}
            print(f"  {VARIANTS[variant][0]:28s} skipped (budget)", flush=True)
            continue
        began = time.perf_counter()
        try:
            result = common.measure_in_subprocess("gpu", f"b.measure({variant!r}, {settings!r})", threads=args.threads)
        except RuntimeError as error:
            outcome[variant_key] = {"error": f"failed: {error}"}
            print(f"  {VARIANTS[variant][0]:28s} FAILED: {error}", flush=True)
        else:
            peak = result["peak_flops"]
            result["mfu"] = flops_per_token * result["tokens_per_s"] / peak if peak else None
            result["seconds"] = time.perf_counter() - began
            outcome[variant_key] = result
            print(
                f"  {VARIANTS[variant][0]:28s} {result['tokens_per_s']:12,.0f} tokens/s  MFU "
                f"{'n/a' if result['mfu'] is None else format(result['mfu'], '.1%')}  peak "
                f"{result['peak_memory_mib']:,.0f} {memory}  ({result['seconds']:.0f} s)",
                flush=True,
            )
        everything["results"] = results
        everything["sizes"] = {
            name: size_summary(facts[name][1], found, args.lr_warmup) for name, found in results.items()
        }
        if args.json:
            with open(args.json, "w", encoding="utf-8") as handle:
                json.dump(everything, handle, indent=1)

    measured = [r for found in results.values() for r in found.values() if "device" in r]
    device_name = measured[0]["device"] if measured else device
    threads = f", {args.threads} threads" if device == "cpu" else ""
    print(
        f"\n### gpu.py (issue 48)\n\n{device_name} ({device}{threads}, {platform.machine()}); "
        + ", ".join(f"{name} {version}" for name, version in everything["versions"].items() if version)
        + f"; precision {args.precision}; data {args.data}; tokens/s at the median of the steps after {args.warmup}"
        f" warm-up ({args.steps} timed; honing and fp8 {args.curve_steps} steps in all); loss read every {LOG_EVERY}"
        f" steps; {everything['date']}; {time.perf_counter() - started:.0f} s in all.\nCommand: `{command}`\n\n"
        "| size | params | variant | tokens/s | MFU | peak memory | vs Trainer | vs hand loop | last loss |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    larger = max(results, key=lambda name: facts[name][1]) if results else None
    lines: list[str] = []
    for size, found in results.items():
        print("\n".join(table(size, facts[size][1], found, memory)))
        lines += target_lines(size, everything["sizes"][size], larger=size == larger)
    print(f"\nTargets ({TARGETS}; fp8 >= 1.2x bf16 within 1% of its loss curve):")
    print("\n".join(lines))
    if args.json:
        print(f"\nraw results: {args.json}")


if __name__ == "__main__":
    main()
