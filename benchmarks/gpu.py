"""One accelerator, a ~0.5B Llama-shaped model at sequence 2,048: tokens/s, MFU and peak memory of honing with its
switches (compile, activation checkpointing, the chunked loss) against the transformers ``Trainer`` and a hand loop.

Shared by every variant: a random Llama from a ``LlamaConfig`` (``--size 0.5b``: Qwen2.5-0.5B's shape, hidden 896 x
24 layers, 14 heads, 2 KV heads, MLP 4,864, tied embeddings; seed 0, sdpa) at each vocabulary (32,000 and 151,936 by
default), ``--batch`` rows of ``--seq-len`` seeded random tokens a step (every position carries a loss), fused AdamW
(lr 3e-4, betas 0.9 / 0.95, eps 1e-8, decay 0.1), clipping at 1.0, a constant LR, ``--precision`` (``bf16-mixed``:
fp32 master weights and optimizer under bf16 autocast; on CUDA FSDP2 gathers the weights in bf16 and reduces
gradients in fp32), and FSDP2 on one device: a one-rank process group (nccl for CUDA tensors, gloo for CPU ones),
each decoder layer and then the root ``fully_shard``-ed.

Variants (``--only NAME``, repeatable):
- ``honing``: ``LMTrainModule`` + ``Trainer`` (metrics file, speed monitor, GC callbacks; no checkpoints) on
  ``parallelize(strategy="fsdp")`` with the defaults of ``parallel.*`` and ``model.chunked_loss`` (compile off,
  activation checkpointing off, chunked loss on). honing resolves ``fsdp`` on one process to ``none`` (nothing to
  shard); here FSDP2 is kept, since its sharded path is what every rank of a multi-GPU run executes;
- ``compile``, ``ac``, ``no-chunked``: that baseline with one switch flipped (``parallel.compile=true``,
  ``parallel.activation_checkpointing=full``, ``model.chunked_loss=false``); ``compile-no-chunked``: two flipped;
- ``trainer``: ``transformers.Trainer`` (``optim=adamw_torch_fused``, ``bf16=True`` for bf16-mixed) with FSDP2
  through accelerate (``fsdp_config={"version": 2}``); accelerate shards on accelerators only: unsharded on CPU;
- ``hand``: a torchtitan-style loop: ``fully_shard`` by hand, forward, full-logits cross-entropy, backward, clip,
  step, ``loss.item()``.

Each variant runs alone in a fresh interpreter (``common.measure_in_subprocess``), one after another. A step's end
is timed after a device sync; tokens/s is a step's tokens over the MEDIAN step time of the ``--steps`` timed steps
after ``--warmup`` (compilation stays in warm-up). MFU = FLOPs per token x tokens/s / the device's peak, FLOPs per
token by honing's ``LMTrainModule.num_flops_per_token``: 6 x the matmul weights (the LM head's included, tied or
not) + 12 x layers x hidden x seq_len for attention (PaLM, appendix B; recomputation is not counted). The peak: the
datasheet's dense bf16 (fp32 for ``fp32``) figure of a known GPU (``honing.train.peak_flops``); on CPU the probed
matmul rate honing's speed monitor uses. Peak memory: ``torch.cuda.max_memory_allocated`` over the timed steps; on
CPU the process's peak RSS (imports included). A variant that fails (OOM, compile error) is reported with its
error's last line and the rest go on.

    .venv/bin/python benchmarks/gpu.py --size 0.5b [--vocab 151936] [--batch 8] [--json gpu.json]
    .venv/bin/python benchmarks/gpu.py --size tiny --device cpu --steps 5 --warmup 2   # the CPU smoke run
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
from timed_steps import StepClock, force_fsdp_on_one_process, free_port, join_one_rank_group
from trainer_overhead import Rows  # {"input_ids", "labels"} rows that both trainers accept

SEED = 0
LR, WEIGHT_DECAY, BETAS, EPS = 3e-4, 0.1, (0.9, 0.95), 1e-8
SIZES = {
    # Qwen2.5-0.5B's shape (its 151,936 vocabulary is the second default): ~494M parameters at that vocabulary
    "0.5b": dict(
        hidden=896, layers=24, heads=14, kv_heads=2, mlp=4864, vocabs=(32_000, 151_936), seq_len=2048, batch=8
    ),
    # the CPU smoke run: every variant end to end in seconds
    "tiny": dict(hidden=64, layers=2, heads=4, kv_heads=2, mlp=128, vocabs=(512, 1024), seq_len=64, batch=2),
}
# name → (label, system, options of that system's runner)
VARIANTS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "honing": ("honing", "honing", {}),
    "compile": ("honing + compile", "honing", {"compile": True}),
    "ac": ("honing + activation ckpt", "honing", {"activation_checkpointing": "full"}),
    "no-chunked": ("honing, chunked loss off", "honing", {"chunked_loss": False}),
    "compile-no-chunked": ("honing + compile, chunked off", "honing", {"compile": True, "chunked_loss": False}),
    "trainer": ("transformers Trainer", "trainer", {}),
    "hand": ("hand loop", "hand", {}),
}
TARGETS = "MFU >= 40%, >= the Trainer's tokens/s, >= 0.97x the hand loop"


# --- what every variant shares (in the measuring process) ----------------------------------------------------
def model_config(settings: dict[str, Any]) -> Any:
    """The benchmark's ``LlamaConfig`` for ``settings``' size, vocabulary and sequence length."""
    from transformers import LlamaConfig

    size = SIZES[settings["size"]]
    return LlamaConfig(
        hidden_size=size["hidden"],
        num_hidden_layers=size["layers"],
        num_attention_heads=size["heads"],
        num_key_value_heads=size["kv_heads"],
        intermediate_size=size["mlp"],
        tie_word_embeddings=True,
        vocab_size=settings["vocab"],
        max_position_embeddings=settings["seq_len"],
        attn_implementation="sdpa",
    )


def build(settings: dict[str, Any], device: Any) -> tuple[Any, Any]:
    """The random model (seed 0) on ``device`` (bf16 weights for ``bf16``, else fp32) and the token rows."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(SEED)
    with torch.device(device):  # initialised in place: a 0.5B model built on the host first takes seconds more
        model = LlamaForCausalLM(model_config(settings))
    if settings["precision"] == "bf16":
        model = model.to(torch.bfloat16)
    rows = settings["batch"] * (settings["warmup"] + settings["steps"])  # every step a fresh batch
    generator = torch.Generator().manual_seed(SEED)
    data = torch.randint(0, settings["vocab"], (rows, settings["seq_len"]), generator=generator)
    return model, data


# --- the three systems ---------------------------------------------------------------------------------------
def run_honing(
    settings: dict[str, Any], device: Any, clock: StepClock, *, chunked_loss: bool = True, **parallel_options: Any
) -> bool:
    """honing's LMTrainModule and Trainer, with its default bookkeeping callbacks, on FSDP2; ``parallel_options``
    go to ``parallelize`` as the recipe passes ``parallel.*`` (``compile``, ``activation_checkpointing``)."""
    import tempfile

    from honing.data.loader import DataLoader
    from honing.interop.olmo_core import TrainerConfig
    from honing.methods.lm import LMTrainModule
    from honing.models import parallel
    from honing.optim.param_groups import build_adamw
    from honing.parallel_dims import ParallelDims
    from honing.train import Callback
    from honing.train.callbacks.gc import GarbageCollectorCallback
    from honing.train.callbacks.metrics_file import MetricsFileCallback
    from honing.train.callbacks.speed_monitor import SpeedMonitorCallback

    class Timer(Callback):
        def on_step_end(self):
            clock.step_end(self.step)

    precision = settings["precision"]
    model, data = build(settings, device)
    force_fsdp_on_one_process()
    dims = ParallelDims(world_size=1)
    dims.build_mesh(device.type)
    model = parallel.parallelize(
        model, strategy="fsdp", dims=dims, device=device, precision=precision, **parallel_options
    )
    optimizer = build_adamw(model, lr=LR, weight_decay=WEIGHT_DECAY, betas=BETAS, eps=EPS)
    module = LMTrainModule(
        model,
        optimizer,
        micro_batch_size=settings["batch"],
        grad_clip=1.0,
        precision=precision,
        device=device,
        scheduler={"name": "constant"},
        chunked_loss=chunked_loss,
    )
    loader = DataLoader(Rows(data), global_batch_size=settings["batch"], seed=SEED, shuffle=False)
    with tempfile.TemporaryDirectory() as folder:
        TrainerConfig(
            save_folder=folder,
            max_duration=f"{settings['warmup'] + settings['steps']}steps",
            metrics_collect_interval=10,
            no_checkpoints=True,
            no_evals=True,
            callbacks={
                "metrics_file": MetricsFileCallback(),
                "timer": Timer(),
                "speed_monitor": SpeedMonitorCallback(seq_len=settings["seq_len"], precision=precision, device=device),
                "gc": GarbageCollectorCallback(interval=100),
            },
        ).build(module, loader).fit()
    return parallel.is_fsdp(model)


def run_trainer(settings: dict[str, Any], device: Any, clock: StepClock) -> bool:
    """transformers.Trainer with the same model, data, batch and optimizer; FSDP2 through accelerate on CUDA."""
    import tempfile

    from torch.distributed.fsdp import FSDPModule
    from transformers import Trainer, TrainerCallback, TrainingArguments

    class Timer(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            clock.step_end(state.global_step)

    model, data = build(settings, device)
    cuda = device.type == "cuda"
    # accelerate shards only on accelerators (FSDP is no distributed type for CPU processes)
    sharding = dict(fsdp=True, fsdp_config={"version": 2, "reshard_after_forward": True}) if cuda else {}
    with tempfile.TemporaryDirectory() as folder:
        args = TrainingArguments(
            output_dir=folder,
            per_device_train_batch_size=settings["batch"],
            max_steps=settings["warmup"] + settings["steps"],
            learning_rate=LR,
            weight_decay=WEIGHT_DECAY,
            adam_beta1=BETAS[0],
            adam_beta2=BETAS[1],
            adam_epsilon=EPS,
            optim="adamw_torch_fused",
            max_grad_norm=1.0,
            lr_scheduler_type="constant",
            logging_steps=10,
            save_strategy="no",
            report_to=[],
            use_cpu=not cuda,
            bf16=settings["precision"] == "bf16-mixed",
            dataloader_num_workers=0,
            seed=SEED,
            disable_tqdm=True,
            **sharding,
        )
        trainer = Trainer(model=model, args=args, train_dataset=Rows(data), callbacks=[Timer()])
        trainer.train()
    return any(isinstance(module, FSDPModule) for module in trainer.model.modules())


def run_hand(settings: dict[str, Any], device: Any, clock: StepClock) -> bool:
    """The minimal FSDP2 loop (torchtitan's wrapping): forward, full-logits loss, backward, clip, fused AdamW."""
    import contextlib

    import torch
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    model, data = build(settings, device)
    mixed = settings["precision"] == "bf16-mixed"
    policy = MixedPrecisionPolicy()
    if mixed and device.type == "cuda":
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    mesh = init_device_mesh(device.type, (1,))
    layers = model.model.layers
    for index, layer in enumerate(layers):
        # the last layer stays gathered after forward: backward starts with it
        fully_shard(layer, mesh=mesh, mp_policy=policy, reshard_after_forward=index < len(layers) - 1)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, betas=BETAS, eps=EPS, fused=True
    )
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if mixed else contextlib.nullcontext()
    model.train()
    batch_size = settings["batch"]
    for step in range(1, settings["warmup"] + settings["steps"] + 1):
        batch = data[(step - 1) * batch_size : step * batch_size].to(device, non_blocking=True)
        with autocast:
            logits = model(input_ids=batch, use_cache=False).logits
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), batch[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()  # a loop that never looks at its loss is not a realistic baseline
        clock.step_end(step)
    return True


RUNNERS = {"honing": run_honing, "trainer": run_trainer, "hand": run_hand}


def measure(variant: str, settings: dict[str, Any]) -> dict[str, Any]:
    """Run ``variant`` in this process: its timing and peak memory, the device's name and peak FLOP/s."""
    import torch
    import torch.distributed as dist

    from honing.train.peak_flops import cpu_model_name, peak_flops
    from honing.train.precision import emulates_bf16

    _, system, options = VARIANTS[variant]
    device = torch.device("cuda", 0) if settings["device"] == "cuda" else torch.device(settings["device"])
    if system != "trainer" or device.type == "cuda":  # the Trainer joins the group itself, through accelerate
        join_one_rank_group(device, settings["port"], init=system != "trainer")
    clock = StepClock(device, settings["warmup"], settings["steps"])
    try:
        sharded = RUNNERS[system](settings, device, clock, **options)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    result = {**clock.result(settings["batch"] * settings["seq_len"]), "fsdp2": sharded}
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


def table(vocab: int, params: int, results: dict[str, dict[str, Any]], memory: str) -> list[str]:
    """One markdown row per variant of one vocabulary."""
    rows = []
    for variant, result in results.items():
        label = VARIANTS[variant][0] + ("" if result.get("fsdp2", True) else " (unsharded)")
        if "error" in result:
            rows.append(f"| {vocab:,} | {params / 1e6:,.3g}M | {label} | failed: {result['error']} | | | | |")
            continue
        mfu = "n/a" if result["mfu"] is None else f"{result['mfu']:.1%}"
        shown = [
            f"{value:.3f}" if value is not None else "n/a"
            for value in (ratio(results, variant, "hand"), ratio(results, variant, "trainer"))
        ]
        rows.append(
            f"| {vocab:,} | {params / 1e6:,.3g}M | {label} | {result['tokens_per_s']:,.0f} | {mfu} | "
            f"{result['peak_memory_mib']:,.0f} {memory} | {shown[0]} | {shown[1]} |"
        )
    return rows


def target_lines(vocab: int, results: dict[str, dict[str, Any]]) -> list[str]:
    """Whether honing's baseline met the issue's targets at this vocabulary."""
    base = results.get("honing", {})
    if "tokens_per_s" not in base:
        return [f"- vocab {vocab:,}: honing's baseline did not run; no targets checked"]
    checks = []
    if base["mfu"] is not None:
        checks.append(f"MFU {base['mfu']:.1%} ({'met' if base['mfu'] >= 0.40 else 'NOT met'}, >= 40%)")
    for other, label, target in (("trainer", "the Trainer", 1.0), ("hand", "the hand loop", 0.97)):
        value = ratio(results, "honing", other)
        if value is not None:
            checks.append(f"{value:.3f}x {label} ({'met' if value >= target else 'NOT met'}, >= {target})")
    return [f"- vocab {vocab:,}, honing baseline: " + "; ".join(checks or ["nothing to compare"])]


def main() -> None:
    """Run the chosen variants at each vocabulary, one subprocess at a time; print the tables and a RESULTS block."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default="0.5b")
    parser.add_argument("--vocab", type=int, action="append", help="repeatable (default: the size's two)")
    parser.add_argument("--seq-len", type=int, help="default: 2,048 (0.5b), 64 (tiny)")
    parser.add_argument("--batch", type=int, help="rows a step, one micro-batch; default: 8 (0.5b), 2 (tiny)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first (compile happens here)")
    parser.add_argument("--precision", choices=["bf16-mixed", "bf16", "fp32"], default="bf16-mixed")
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when there is one")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads in each run")
    parser.add_argument("--only", action="append", choices=list(VARIANTS), help="a variant to run (repeatable)")
    parser.add_argument("--json", help="write the raw results here")
    args = parser.parse_args()
    if args.warmup < 1 or args.steps < 1:
        parser.error("--warmup and --steps must be >= 1 (the clock starts at the end of the last warm-up step)")
    import torch  # after parsing: --help stays quick

    size = SIZES[args.size]
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    base = dict(
        size=args.size,
        seq_len=args.seq_len or size["seq_len"],
        batch=args.batch or size["batch"],
        warmup=args.warmup,
        steps=args.steps,
        precision=args.precision,
        device=device,
    )
    variants = [name for name in VARIANTS if name in args.only] if args.only else list(VARIANTS)
    memory = "MiB allocated" if device == "cuda" else "MiB RSS"
    everything: dict[str, Any] = {"args": vars(args), "settings": base, "vocabs": {}}
    rows: list[str] = []
    targets: list[str] = []
    started = time.perf_counter()
    for vocab in args.vocab or size["vocabs"]:
        flops_per_token, params = model_flops({**base, "vocab": vocab})
        print(f"\nvocab {vocab:,}: {params:,} parameters, {flops_per_token / 1e9:.3f} GFLOP per token", flush=True)
        results: dict[str, dict[str, Any]] = {}
        for variant in variants:
            settings = {**base, "vocab": vocab, "port": free_port()}
            began = time.perf_counter()
            try:
                result = common.measure_in_subprocess(
                    "gpu", f"b.measure({variant!r}, {settings!r})", threads=args.threads
                )
            except RuntimeError as error:
                results[variant] = {"error": str(error)}
                print(f"  {VARIANTS[variant][0]:26s} FAILED: {error}", flush=True)
                continue
            peak = result["peak_flops"]
            result["mfu"] = flops_per_token * result["tokens_per_s"] / peak if peak else None
            results[variant] = result
            print(
                f"  {VARIANTS[variant][0]:26s} {result['tokens_per_s']:12,.0f} tokens/s  MFU "
                f"{'n/a' if result['mfu'] is None else format(result['mfu'], '.1%')}  peak "
                f"{result['peak_memory_mib']:,.0f} {memory}  ({time.perf_counter() - began:.0f} s)",
                flush=True,
            )
        everything["vocabs"][vocab] = {"params": params, "flops_per_token": flops_per_token, "results": results}
        rows += table(vocab, params, results, memory)
        targets += target_lines(vocab, results)

    measured = [r for v in everything["vocabs"].values() for r in v["results"].values() if "device" in r]
    device_name = measured[0]["device"] if measured else device
    torch_version = measured[0]["torch"] if measured else torch.__version__
    threads = f", {args.threads} threads" if device == "cpu" else ""
    command = " ".join([".venv/bin/python", "benchmarks/gpu.py", *sys.argv[1:]])
    print(
        f"\n### gpu.py: {args.size} Llama-shaped model, FSDP2 on one device (issue 15)\n\n"
        f"{device_name} ({device}{threads}, {platform.machine()}); torch {torch_version}, transformers "
        f"{importlib.metadata.version('transformers')}; precision {args.precision}; {base['batch']} rows x "
        f"{base['seq_len']:,} tokens a step; tokens/s at the median of {args.steps} timed steps after "
        f"{args.warmup} warm-up; {datetime.date.today().isoformat()}; {time.perf_counter() - started:.0f} s in all.\n"
        f"Command: `{command}`\n\n"
        "| vocab | params | variant | tokens/s | MFU | peak memory | vs hand loop | vs Trainer |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    print("\n".join(rows))
    print(f"\nTargets ({TARGETS}):")
    print("\n".join(targets))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(everything, handle, indent=1)
        print(f"\nraw results: {args.json}")


if __name__ == "__main__":
    main()
