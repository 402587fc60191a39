"""Peak memory of one training step of a Llama-shaped model in each memory mode, against ``honing plan``'s estimate.

    .venv/bin/python benchmarks/memory.py                      # the ~1B model (TinyLlama's shape), seq 1,024
    .venv/bin/python benchmarks/memory.py --layers 4 --modes lora,qlora   # a smaller, quicker check
    .venv/bin/python benchmarks/memory.py --largest 20GiB --margin 0.08 --confirm   # each mode's largest, one step
    .venv/bin/python benchmarks/memory.py --modes lora,qlora --checkpoint   # the base read from a saved folder

Each mode runs in its own process (random weights from the config, ``method: pretrain`` on generated text, micro-
batch 1, bf16 weights where the CPU has native bf16 (else fp32), full activation checkpointing in every mode): the
recipe builds the run exactly as ``honing train`` does, then takes two steps (the second has the optimizer's states).
On CPU the figure is the process's peak resident set (``VmHWM``) over the two steps, reset after the model is
built (the build's own peak is printed beside it); on CUDA it is ``torch.cuda.max_memory_allocated`` plus the
planner's CUDA allowance. The planner's estimate is computed in the same process, before the model is built.

Modes: ``full`` (AdamW), ``full-8bit`` (``optim.state_dtype: int8``), ``full-offload`` (``parallel.offload:
optimizer``, CUDA only), ``lora`` (rank 16 on every linear), ``qlora`` (the same on an NF4 base).
``--checkpoint`` saves the random model once (in the run's dtype) and every mode reads it back through
``model.name_or_path``, as a fine-tuning run does: QLoRA then quantizes each weight as it is read rather than
building the model in full precision first (the build column shows the difference).
``parallel.offload: params`` needs FSDP2 on 2 or more GPUs, so it is measured with ``honing train CONFIG --nproc 2
parallel.offload=params`` (its ``system/`` memory metrics) rather than here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

MODES = ("full", "full-8bit", "full-offload", "lora", "qlora")
CUDA_ONLY = ("full-offload",)  # on CPU the host is the device: parallel.offload is refused there
LLAMA_1B = {  # TinyLlama-1.1B's shape
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 22,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
}


def llama_shape(hidden: int) -> dict:
    """A Llama-shaped model of width ``hidden``: TinyLlama's ratios (MLP 2.75x, heads of 64, 8 query heads per
    key-value head), the 32,000-token vocabulary."""
    heads = hidden // 64
    return {
        **LLAMA_1B,
        "hidden_size": hidden,
        "intermediate_size": int(hidden * 2.75) // 256 * 256,
        "num_attention_heads": heads,
        "num_key_value_heads": max(heads // 8, 1),
    }


def run_config(
    mode: str,
    folder: str,
    *,
    layers: int,
    seq_len: int,
    precision: str,
    device: str,
    hidden: int = 2048,
    checkpoint: str | None = None,
) -> dict:
    """The config of one mode: the same model, data and step in all; what differs is the mode's keys."""
    model: dict = {"config": {**llama_shape(hidden), "num_hidden_layers": layers}, "chunked_loss": True}
    if checkpoint:  # the same model, read back from its saved folder
        model = {"name_or_path": checkpoint, "chunked_loss": True}
    optim: dict = {"lr": 1e-4}
    parallel = {"activation_checkpointing": "full"}
    if mode in ("lora", "qlora"):
        model["lora"] = {"rank": 16, "alpha": 32, "target_modules": "all-linear"}
    if mode == "qlora":
        model["quantize"] = "nf4"
    if mode == "full-8bit":
        optim["state_dtype"] = "int8"
    if mode == "full-offload":
        parallel["offload"] = "optimizer"
    text = os.path.join(folder, "corpus.txt")
    with open(text, "w") as handle:  # any text: the step's memory does not depend on the words
        handle.write(" ".join(f"word{i % 997}" for i in range(seq_len * 8)))
    return {
        "method": "pretrain",
        "trainer": {"save_folder": os.path.join(folder, "run"), "precision": precision, "device": device},
        "data": {
            "train": {"sources": [{"path": text}]},
            "seq_len": seq_len,
            "global_batch_size": 1,
            "cache_dir": os.path.join(folder, "cache"),
        },
        "tokenizer": {"kind": "byte"},
        "model": model,
        "optim": optim,
        "parallel": parallel,
        "callbacks": {
            "evaluator": {"enabled": False},
            "sample": {"enabled": False},
            "console": {"enabled": False},
            "speed_monitor": {"enabled": False},
        },
    }


def status_bytes(field: str) -> int:
    """A ``/proc/self/status`` memory field (``VmHWM``: peak resident set, ``VmRSS``: now) in bytes."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def reset_peak() -> None:
    """Start ``VmHWM`` again from the current resident set (Linux: ``echo 5 > /proc/self/clear_refs``)."""
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")


def save_checkpoint(folder: str, args: argparse.Namespace) -> None:
    """The benchmark's model with random weights, saved to ``folder`` in the run's dtype (``--checkpoint``)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    shape = {**llama_shape(args.hidden), "num_hidden_layers": args.layers}
    config = AutoConfig.for_model(shape.pop("model_type"), **shape)
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config, dtype=dtype).save_pretrained(folder)


class AnonymousPeak:
    """The highest ``RssAnon`` (resident memory that is no file's page) seen while the block runs, sampled every
    5 ms: the kernel keeps no peak of it, and a read checkpoint's mapped pages count in ``VmHWM``."""

    def __enter__(self) -> AnonymousPeak:
        self.peak, self.running = status_bytes("RssAnon"), True
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()
        return self

    def sample(self) -> None:
        while self.running:
            self.peak = max(self.peak, status_bytes("RssAnon"))
            time.sleep(0.005)

    def __exit__(self, *exc: object) -> None:
        self.running = False
        self.thread.join()


def child(mode: str, args: argparse.Namespace) -> dict:
    """One mode in this process: the plan, the build, two steps; the figures as a dict."""
    import torch

    from honing.cli_plan import plan_run
    from honing.config import validate
    from honing.distributed import prepare_training_environment
    from honing.recipes import recipe_class

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as folder:
        config = validate(run_config(mode, folder, **vars(args)["config"]))
        text, planned = plan_run(config)
        prepare_training_environment(seed=0)
        reset_peak()
        started = time.monotonic()
        recipe = recipe_class(config.method)(config)
        with AnonymousPeak() as build_anonymous:
            recipe.build()
        build_peak = status_bytes("VmHWM")
        reset_peak()
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        module = recipe.train_module
        if module.trainer is None:
            module.on_attach(recipe.trainer)
        batches = iter(recipe.train_loader)
        for _ in range(args.steps):
            module.zero_grads()
            module.train_batch(next(batches))
            module.optim_step()
        train_peak = status_bytes("VmHWM")
        measured = train_peak
        if torch.cuda.is_available():
            measured = torch.cuda.max_memory_allocated() + planned.runtime
        return {
            "mode": mode,
            "measured_peak": measured,
            "host_train_peak": train_peak,
            "host_build_peak": build_peak,
            # the resident set less file pages: what a checkpoint's memory map adds while it is read is page cache
            "host_build_anonymous_peak": build_anonymous.peak,
            "planned_peak": planned.peak,
            "planned_build": planned.build,
            "planned_parts": planned.parts(),
            "plan": text,
            "seconds": time.monotonic() - started,
        }


def largest_models(budget: int, modes: list[str], args: argparse.Namespace) -> list[tuple[str, int, int, int]]:
    """For each mode, the Llama-shaped model with the most parameters whose planned peak fits ``budget``: the
    deepest of each width in ``WIDTHS``. Returns ``(mode, hidden, layers, parameters)``."""
    from dataclasses import replace

    from honing.config import validate
    from honing.plan.estimate import estimate
    from honing.plan.from_config import meta_model, plan_inputs, runtime_bytes, tensors_of

    # the runtime part is this process's resident set after the imports: measured once, before the planner's own
    # measuring blocks (wide ones leave freed memory resident) could inflate it
    runtime = runtime_bytes("cuda" if args.device == "cuda" else "cpu")
    found = []
    with tempfile.TemporaryDirectory() as folder:
        for mode in [mode for mode in modes if mode not in CUDA_ONLY or args.device == "cuda"]:
            best = (0, 0, 0)
            for hidden in WIDTHS:
                config = validate(run_config(mode, folder, **{**args.config, "layers": 1, "hidden": hidden}))
                plan, model_config = plan_inputs(config)
                plan = replace(plan, runtime_bytes=runtime, quantized_while_loading=args.checkpoint)

                def fits(layers: int, config=config, plan=plan, model_config=model_config) -> tuple[bool, int]:
                    model_config.num_hidden_layers = layers
                    tensors = tensors_of(meta_model(model_config), config)
                    params = sum(tensors.quantizable + tensors.other)
                    result = estimate(replace(plan, tensors=tensors, layers=layers))
                    # on CPU the host is the device: a QLoRA model built from its config is built there in full
                    # precision first (read from a checkpoint, each weight is quantized as it arrives)
                    peak = result.peak if args.device == "cuda" else max(result.peak, result.build)
                    return peak <= budget, params

                low, high = 0, 1
                while fits(high)[0] and high < 512:
                    low, high = high, high * 2
                while high - low > 1:
                    middle = (low + high) // 2
                    low, high = (middle, high) if fits(middle)[0] else (low, middle)
                if low and fits(low)[1] > best[2]:
                    best = (hidden, low, fits(low)[1])
            found.append((mode, *best))
            print(f"{mode}: largest within {budget / 2**30:.1f} GiB: hidden {best[0]}, {best[1]} layers, "
                  f"{best[2] / 1e9:.2f}B parameters", flush=True)  # fmt: skip
    return found


WIDTHS = (2048, 2560, 3072, 4096, 5120)
# glibc returns a freed block above this size to the system at once (its default threshold rises to 32 MiB once big
# blocks are freed, and freed memory then stays resident): a child's peak is what was live
SMALL_FREES = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}


def main() -> None:
    """Run every mode in a fresh process and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--layers", type=int, default=LLAMA_1B["num_hidden_layers"])
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--precision", default="auto", help="auto: bf16 on CUDA or a CPU with native bf16, else fp32")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--json", help="write the figures here as well")
    parser.add_argument("--hidden", type=int, default=LLAMA_1B["hidden_size"])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--checkpoint", action="store_true", help="read the model back from a saved folder")
    parser.add_argument("--checkpoint-folder", help=argparse.SUPPRESS)
    parser.add_argument("--save-checkpoint", help=argparse.SUPPRESS)
    parser.add_argument("--largest", metavar="SIZE", help="the largest model of each mode within SIZE (planned)")
    parser.add_argument("--confirm", action="store_true", help="with --largest: one step of each, held to SIZE")
    parser.add_argument(
        "--margin",
        type=float,
        default=0.0,
        help="with --confirm: plan within SIZE less this fraction (the planner's error)",
    )
    args = parser.parse_args()
    if args.precision == "auto":
        args.precision = native_precision(args.device)
    args.config = {
        "layers": args.layers,
        "seq_len": args.seq_len,
        "precision": args.precision,
        "device": args.device,
        "hidden": args.hidden,
        "checkpoint": args.checkpoint_folder,
    }
    if args.save_checkpoint:
        save_checkpoint(args.save_checkpoint, args)
        return
    if args.largest:
        from honing.plan.estimate import parse_bytes

        budget = parse_bytes(args.largest)
        if args.confirm:  # the planning in its own process: its measuring blocks leave GiBs resident in this one
            command = [sys.executable, __file__, "--largest", args.largest, f"--margin={args.margin}"]
            planned = subprocess.run(
                [*command, f"--modes={args.modes}", *passthrough(args)], capture_output=True, text=True, env=SMALL_FREES
            )
            lines = [line for line in planned.stdout.splitlines() if line.startswith("LARGEST ")]
            if planned.returncode != 0 or not lines:
                raise SystemExit(f"planning failed: {planned.stderr[-2000:]}")
            print("\n".join(line for line in planned.stdout.splitlines() if not line.startswith("LARGEST ")))
            confirm_largest([tuple(row) for row in json.loads(lines[-1][len("LARGEST ") :])], budget, args)
            return
        found = largest_models(int(budget * (1 - args.margin)), args.modes.split(","), args)
        print("LARGEST " + json.dumps(found), flush=True)
        return
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args)), flush=True)
        return
    with tempfile.TemporaryDirectory() as checkpoint:
        if args.checkpoint:
            command = [sys.executable, __file__, f"--save-checkpoint={checkpoint}", *passthrough(args)]
            subprocess.run(command, check=True, env=SMALL_FREES)
            args.checkpoint_folder = checkpoint
        results = run_modes(args)
    report(results, args)


def run_modes(args: argparse.Namespace) -> list[dict]:
    """Each mode in a fresh process: its plan and measured peaks."""
    results = []
    for mode in args.modes.split(","):
        if mode in CUDA_ONLY and not cuda_run(args):
            print(f"{mode}: applies on CUDA only (parallel.offload moves GPU memory to the host); skipped", flush=True)
            continue
        command = [sys.executable, __file__, "--child", mode, *passthrough(args)]
        done = subprocess.run(command, capture_output=True, text=True, env=SMALL_FREES)
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if done.returncode != 0 or not lines:
            print(f"{mode}: failed (exit {done.returncode}): {done.stderr[-1500:]}", flush=True)
            continue
        result = json.loads(lines[-1][len("RESULT ") :])
        results.append(result)
        print(result["plan"], flush=True)
        measured, planned = result["measured_peak"], result["planned_peak"]
        print(
            f"{mode}: measured {gib(measured)} (build {gib(result['host_build_peak'])}, anonymous "
            f"{gib(result['host_build_anonymous_peak'])}, planned "
            f"{gib(result['planned_build'])}), planned {gib(planned)} "
            f"({planned / measured - 1:+.1%}), {result['seconds']:.0f} s",
            flush=True,
        )
    return results


def report(results: list[dict], args: argparse.Namespace) -> None:
    """The table and the ratios the issue sets targets for; the figures as JSON with ``--json``."""
    by_mode = {r["mode"]: r["measured_peak"] for r in results}
    print("\n| mode | measured peak | planned | planned / measured |\n| --- | --- | --- | --- |")
    for r in results:
        ratio = r["planned_peak"] / r["measured_peak"]
        print(f"| {r['mode']} | {gib(r['measured_peak'])} | {gib(r['planned_peak'])} | {ratio:.2f} |")
    if "qlora" in by_mode and "lora" in by_mode:
        print(f"QLoRA / LoRA peak: {by_mode['qlora'] / by_mode['lora']:.2f} (target <= 0.35)")
    if "full-offload" in by_mode and "full" in by_mode:
        print(f"optimizer offload / AdamW peak: {by_mode['full-offload'] / by_mode['full']:.2f}")
    if "full-8bit" in by_mode and "full" in by_mode:
        print(f"8-bit AdamW / AdamW peak: {by_mode['full-8bit'] / by_mode['full']:.2f} (target <= 0.6)")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)


def confirm_largest(found: list[tuple[str, int, int, int]], budget: int, args: argparse.Namespace) -> None:
    """One training step of each mode's largest planned model in a fresh process, killed the moment its resident
    set passes ``budget``: the step either completes within the budget or the mode is reported as not fitting."""
    print("\n| mode | model | planned peak | measured peak (build, step) | within budget | seconds |")
    print("| --- | --- | --- | --- | --- | --- |", flush=True)
    for mode, hidden, layers, params in found:
        if not layers:
            print(f"| {mode} | none fits | | | | |", flush=True)
            continue
        settings = {**vars(args), "hidden": hidden, "layers": layers, "steps": 1}
        command = [sys.executable, __file__, "--child", mode, *passthrough(argparse.Namespace(**settings))]
        started = time.monotonic()
        with tempfile.TemporaryFile("w+") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, text=True, env=SMALL_FREES)
            highest = 0
            while process.poll() is None:
                highest = max(highest, process_rss(process.pid))
                if highest > budget:
                    process.kill()
                time.sleep(0.05)
            out.seek(0)
            lines = [line for line in out.read().splitlines() if line.startswith("RESULT ")]
        seconds = time.monotonic() - started
        model = f"{params / 1e9:.2f} B ({hidden} x {layers})"
        if process.returncode != 0 or not lines:
            why = f"no: passed {gib(budget)}" if highest > budget else f"failed (exit {process.returncode})"
            print(f"| {mode} | {model} | | {gib(highest)} when stopped | {why} | {seconds:.0f} |", flush=True)
            continue
        result = json.loads(lines[-1][len("RESULT ") :])
        peak = max(result["host_build_peak"], result["host_train_peak"])
        print(
            f"| {mode} | {model} | {gib(result['planned_peak'])} | {gib(peak)} ({gib(result['host_build_peak'])}, "
            f"{gib(result['host_train_peak'])}) | {'yes' if peak <= budget else 'no'} | {seconds:.0f} |",
            flush=True,
        )


def process_rss(pid: int) -> int:
    """Another process's resident set in bytes (0 once it has gone)."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except FileNotFoundError:
        pass
    return 0


def native_precision(device: str) -> str:
    """bf16 where it runs natively (CUDA, a CPU with AVX-512 BF16 or AMX), else fp32: emulated bf16 on CPU is ~10x
    slower and a 1 B model's step would take most of an hour."""
    import torch

    from honing.train.precision import cpu_has_native_bf16

    on_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    return "bf16" if on_cuda or cpu_has_native_bf16() else "fp32"


def cuda_run(args: argparse.Namespace) -> bool:
    """Whether the modes run on CUDA (``--device cuda``, or ``auto`` with a GPU)."""
    if args.device != "auto":
        return args.device == "cuda"
    import torch

    return torch.cuda.is_available()


def gib(value: float) -> str:
    """``1.23 GiB``."""
    return f"{value / 2**30:.2f} GiB"


def passthrough(args: argparse.Namespace) -> list[str]:
    """The parent's settings as a child's arguments."""
    return [
        f"--layers={args.layers}",
        f"--seq-len={args.seq_len}",
        f"--precision={args.precision}",
        f"--device={args.device}",
        f"--threads={args.threads}",
        f"--hidden={args.hidden}",
        f"--steps={args.steps}",
        *([f"--checkpoint-folder={args.checkpoint_folder}"] if getattr(args, "checkpoint_folder", None) else []),
    ]


if __name__ == "__main__":
    main()
