"""Parallel layouts on one machine: tokens/s and memory per rank of each layout of the mesh against one process.

Every layout trains through honing's own path (``ParallelDims`` → ``check_model_layout`` → ``parallelize`` →
``LMTrainModule(parallel_dims=...)`` → the Trainer, the loader sliced over ``dims.dp_rank / dims.dp_size``), with
the same model, data, global batch and seed as one process. Several processes are started by torchrun; on CPU
(gloo) each has one thread, against one process with two threads: the same two cores.

Per layout and rank, read during one step after the warm-up (step ``warmup``, outside the timed window):

- **state**: the bytes of this rank's parameters, gradients and AdamW states as they live in memory after the
  step (distinct storages of the DTensors' local shards: FSDP2's padded shards, tensor-parallel slices, plain
  tensors where a weight is whole). DDP's gradient buckets (one more copy of the gradients) are not counted;
- **activations**: the bytes autograd keeps for backward during the largest micro-batch's forward (distinct
  storages of the tensors a ``saved_tensors_hooks`` sees; weights, and views of weights, left out): exact and free
  of allocator noise;
- **growth**: on CPU, ``VmHWM`` (peak resident memory, reset through ``/proc/self/clear_refs``) minus ``VmRSS``
  before the step's forward and backward, the C allocator's free memory returned first (``malloc_trim``); on CUDA,
  ``max_memory_allocated`` minus ``memory_allocated`` before them;
- **peak**: the process's peak over the whole run: ``VmHWM`` on CPU (the imports alone hold ~0.75 GB),
  ``max_memory_allocated`` on CUDA.

Memory is the largest figure over ranks. Throughput is timed on rank 0 from the end of the warm-up to the end of
the run (every step's collectives keep the ranks in step). Workloads, each at a size where its saving shows:

- ``weights``: hidden 512 × 4 layers (13.9 M parameters, 212 MiB of state in fp32), 8 × 256 tokens a step:
  tensor parallelism and sharding against replication (DDP);
- ``long``: the quickstart's width (hidden 128 × 4 layers) on rows of 4,096 tokens, one row per micro-batch:
  sequence parallelism's activations, plain causal rows (sdpa takes no mask: ``is_causal``);
- ``packed``: the same rows packed with 4 documents each (positions restart per document): sdpa then takes a dense
  ``seq × seq`` mask, which every cp rank builds for the whole row;
- ``moe``: a small qwen3_moe (8 experts, 2 per token): expert parallelism's expert state per rank.

Each measurement is a fresh launch (one at a time: never two timings at once); the layouts alternate round by round
and the medians of the rounds are printed with the ratios to one process.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/scaling.py [--rounds 3] [--workloads weights,long,packed,moe]
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/scaling.py --quick   # tiny sizes, one round: a smoke run
    .venv/bin/python benchmarks/scaling.py --device cuda                # GPU sizes; a layout needs a GPU per process
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from common import OFFLINE, REPO, machine_summary  # this folder is on the path when run
from memory_probes import DeviceMemory, SavedActivations, state_bytes
from trainer_overhead import Rows  # the same token rows

VOCAB = 258  # byte-level: 256 bytes + the quickstart tokenizer's end-of-document and padding tokens
LR = 3e-3
MIB = 2**20


@dataclasses.dataclass(frozen=True)
class Layout:
    """How one measurement runs: processes, torch threads each (on CPU), ``parallel.strategy``, the mesh's sizes."""

    title: str
    processes: int
    threads: int
    strategy: str
    dims: dict[str, int] = dataclasses.field(default_factory=dict)


LAYOUTS = {
    "one": Layout("1 process", 1, 2, "none"),
    "ddp": Layout("DDP, 2 processes", 2, 1, "ddp"),
    "fsdp": Layout("FSDP2 dp_shard=2", 2, 1, "fsdp", {"dp_shard": 2}),
    "tp": Layout("tp=2", 2, 1, "fsdp", {"tp": 2}),
    "cp": Layout("cp=2", 2, 1, "fsdp", {"cp": 2}),
    "ep": Layout("ep=2", 2, 1, "fsdp", {"ep": 2}),
    "fsdp_tp": Layout("dp_shard=2 x tp=2 (4 procs)", 4, 1, "fsdp", {"dp_shard": 2, "tp": 2}),
    "fsdp_cp": Layout("dp_shard=2 x cp=2 (4 procs)", 4, 1, "fsdp", {"dp_shard": 2, "cp": 2}),
    "hsdp": Layout("HSDP 2 x 2 (4 procs)", 4, 1, "fsdp", {"dp_replicate": 2, "dp_shard": 2}),
}


@dataclasses.dataclass(frozen=True)
class Workload:
    """A model config (``model.config`` as a run gives it), its rows and the layouts measured on it."""

    model: dict[str, Any]
    seq_len: int
    global_batch: int
    layouts: tuple[str, ...]
    micro_batch: int | None = None  # rows per forward on each rank (None: the whole local batch)
    documents: int = 1  # documents packed into each row (per-document positions)
    warmup: int = 3
    steps: int = 10


def llama(hidden: int, layers: int, heads: int, intermediate: int) -> dict[str, Any]:
    """A dense Llama's ``model.config``."""
    return dict(
        model_type="llama",
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        intermediate_size=intermediate,
        vocab_size=VOCAB,
    )


def qwen3_moe(hidden: int, layers: int, experts: int) -> dict[str, Any]:
    """A qwen3_moe ``model.config``: 4 heads, ``experts`` experts of half the dense MLP's width, 2 per token."""
    return dict(
        model_type="qwen3_moe",
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=hidden // 4,
        intermediate_size=4 * hidden,
        moe_intermediate_size=2 * hidden,
        num_experts=experts,
        num_experts_per_tok=2,
        vocab_size=VOCAB,
    )


DENSE = ("one", "ddp", "fsdp", "tp", "cp", "fsdp_tp")
WORKLOADS = {
    "weights": Workload(llama(512, 4, 8, 1536), 256, 8, (*DENSE, "hsdp")),
    # two rows: a step of 1 process × 2 threads takes ~1.2 s; HSDP would need 4 (one per data-parallel rank)
    "long": Workload(llama(128, 4, 4, 512), 4096, 2, (*DENSE, "fsdp_cp"), micro_batch=1, warmup=2, steps=6),
    "packed": Workload(llama(128, 4, 4, 512), 4096, 2, ("one", "cp"), micro_batch=1, documents=4, warmup=2, steps=4),
    "moe": Workload(qwen3_moe(256, 2, 8), 256, 8, ("one", "ddp", "fsdp", "ep")),
}
# --quick: the same code paths at tiny sizes, a few layouts each, one step timed
QUICK = {
    "weights": Workload(llama(64, 2, 4, 128), 32, 4, ("one", "ddp", "tp", "hsdp"), warmup=2, steps=1),
    "long": Workload(llama(64, 2, 4, 128), 256, 2, ("one", "cp"), micro_batch=1, warmup=2, steps=1),
    "packed": Workload(llama(64, 2, 4, 128), 256, 2, ("cp",), micro_batch=1, documents=4, warmup=2, steps=1),
    "moe": Workload(qwen3_moe(64, 2, 4), 32, 4, ("one", "ep"), warmup=2, steps=1),
}
# --device cuda: sizes for 80 GB GPUs (not run yet: no multi-GPU machine so far); fp32 like the CPU runs
GPU = {
    "weights": Workload(llama(2048, 16, 16, 5632), 2048, 4, (*DENSE, "hsdp")),  # 0.8 B parameters, 12 GiB state
    "long": Workload(llama(1024, 8, 16, 2816), 32768, 2, (*DENSE, "fsdp_cp"), micro_batch=1),
    "packed": Workload(llama(1024, 8, 16, 2816), 16384, 2, ("one", "cp"), micro_batch=1, documents=4),
    "moe": Workload(qwen3_moe(1024, 8, 32), 2048, 8, ("one", "ddp", "fsdp", "ep")),  # 1.6 B, 24 GiB state
}


def token_rows(count: int, seq_len: int, documents: int) -> Rows:
    """``count`` random token rows; with ``documents`` > 1 each row holds that many equal documents whose positions
    restart (as honing's packing writes them), so attention must keep the documents apart."""
    import torch

    tokens = torch.randint(0, VOCAB, (count, seq_len), generator=torch.Generator().manual_seed(0))
    if documents == 1:
        return Rows(tokens)
    positions = torch.arange(seq_len // documents).repeat(documents)

    class PackedRows(Rows):
        def __getitem__(self, index):
            return {**super().__getitem__(index), "position_ids": positions}

    return PackedRows(tokens)


def worker(workloads: dict[str, Workload], workload_name: str, layout_name: str, device_type: str, folder: str):
    """One process of a layout: honing's Trainer on the parallelised model; each rank writes its memory figures,
    rank 0 also tokens/s, to ``folder/rank<R>.json``."""
    import torch

    from honing.data.loader import DataLoader
    from honing.distributed import (
        default_device,
        get_rank,
        get_world_size,
        is_rank0,
        prepare_training_environment,
        teardown_training_environment,
    )
    from honing.interop.olmo_core import TrainerConfig
    from honing.methods.lm import LMTrainModule
    from honing.models.loading import build_model_config, build_model_from_config
    from honing.models.model_parallel import check_model_layout
    from honing.models.parallel import parallelize
    from honing.optim.param_groups import build_adamw
    from honing.parallel_dims import ParallelDims
    from honing.train import Callback
    from honing.train.callbacks.gc import GarbageCollectorCallback
    from honing.train.callbacks.metrics_file import MetricsFileCallback

    workload = workloads[workload_name]
    layout = LAYOUTS[layout_name]
    measure_step = workload.warmup  # its end starts the timed window
    last_step = workload.warmup + workload.steps
    device = default_device() if device_type == "cuda" else torch.device("cpu")
    memory = DeviceMemory(device)

    class MeasuredLM(LMTrainModule):
        """honing's LM train module, reading its memory during ``measure_step``."""

        figures: dict[str, int] = {}

        def measuring(self) -> bool:
            return self.trainer is not None and self.trainer.global_step == measure_step

        def forward_loss(self, micro, grad_scale=1.0):
            if not self.measuring():
                return super().forward_loss(micro, grad_scale)
            with SavedActivations() as saved:  # one micro-batch's: the next reuses the memory of this one
                result = super().forward_loss(micro, grad_scale)
            self.figures["activation_bytes"] = max(self.figures.get("activation_bytes", 0), saved.bytes)
            return result

        def train_batch(self, batch, dry_run=False):
            if not self.measuring():
                return super().train_batch(batch, dry_run)
            self.figures["peak_before"] = memory.peak()
            memory.reset_peak()
            before = memory.current()
            super().train_batch(batch, dry_run)
            self.figures["growth_bytes"] = memory.peak() - before

        def optim_step(self):
            super().optim_step()
            if self.measuring():
                self.figures.update(state_bytes(self.model, self.optimizer))

    class Timer(Callback):
        times: dict[int, float] = {}

        def on_step_end(self):
            if self.step in (measure_step, last_step):
                if device.type == "cuda":
                    torch.cuda.synchronize()
                self.times[self.step] = time.perf_counter()

    prepare_training_environment(seed=0)
    try:
        config = build_model_config(workload.model, max_position_embeddings=workload.seq_len)
        model = build_model_from_config(config).to(device)
        dims = ParallelDims(**layout.dims, world_size=get_world_size())
        dims.build_mesh(device.type)
        check_model_layout(model, dims, seq_len=workload.seq_len)
        model = parallelize(model, strategy=layout.strategy, dims=dims, device=device)
        optimizer = build_adamw(model, lr=LR, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8)
        local_batch = workload.global_batch // dims.dp_size
        module = MeasuredLM(
            model,
            optimizer,
            micro_batch_size=workload.micro_batch or local_batch,
            grad_clip=1.0,
            scheduler={"name": "constant"},
            device=device,
            parallel_dims=dims,
        )
        rows = token_rows(workload.global_batch * (last_step + 1), workload.seq_len, workload.documents)
        loader = DataLoader(
            rows,
            global_batch_size=workload.global_batch,
            seed=0,
            shuffle=False,
            rank=dims.dp_rank,
            world_size=dims.dp_size,
        )
        timer = Timer()
        with tempfile.TemporaryDirectory() as save_folder:
            TrainerConfig(
                save_folder=save_folder,
                max_duration=f"{last_step}steps",
                metrics_collect_interval=10,
                callbacks={
                    "metrics_file": MetricsFileCallback(),
                    "timer": timer,
                    "gc": GarbageCollectorCallback(interval=100),
                },
            ).build(module, loader).fit()
        figures = dict(MeasuredLM.figures)
        figures["peak_bytes"] = max(figures.pop("peak_before"), memory.peak())
        if is_rank0():
            tokens = workload.steps * workload.global_batch * workload.seq_len
            figures["tokens_per_s"] = tokens / (timer.times[last_step] - timer.times[measure_step])
        with open(os.path.join(folder, f"rank{get_rank()}.json"), "w") as handle:
            json.dump(figures, handle)
    finally:
        teardown_training_environment()


# --- the launcher ---------------------------------------------------------------------------
def measure(workload: str, layout_name: str, sizes: str, device_type: str) -> dict[str, float]:
    """Launch one layout in fresh processes; tokens/s and each memory figure's largest value over ranks."""
    layout = LAYOUTS[layout_name]
    with tempfile.TemporaryDirectory() as folder:
        script = [os.path.abspath(__file__), "--worker", workload, layout_name, "--out", folder]
        script += ["--sizes", sizes, "--device", device_type]
        if layout.processes == 1:
            command = [sys.executable, *script]
        else:
            launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
            command = [*launcher, f"--nproc_per_node={layout.processes}", *script]
        env = {**os.environ, **OFFLINE, "PYTHONPATH": REPO}
        if device_type == "cpu":
            env["OMP_NUM_THREADS"] = str(layout.threads)
        completed = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, check=False)
        if completed.returncode != 0:
            print(completed.stderr[-4000:], file=sys.stderr)
            raise RuntimeError(f"{workload} / {layout.title}: exit code {completed.returncode}")
        ranks = []
        for rank in range(layout.processes):
            with open(os.path.join(folder, f"rank{rank}.json")) as handle:
                ranks.append(json.load(handle))
    result = {key: max(rank[key] for rank in ranks) for key in ranks[0] if key != "tokens_per_s"}
    result["tokens_per_s"] = ranks[0]["tokens_per_s"]
    return result


def mib(value: float) -> str:
    return f"{value / MIB:,.1f}"


def state(figures: dict[str, float]) -> float:
    """Weights + gradients + optimizer states, in bytes."""
    return figures["param_bytes"] + figures["grad_bytes"] + figures["optimizer_bytes"]


def report(name: str, workload: Workload, medians: dict[str, dict[str, float]], rounds: int, device: str) -> None:
    """The table of one workload: each figure's median over rounds and its ratio to one process."""
    model = workload.model
    experts = "num_experts" in model
    details = [f"{model['num_experts']} experts"] if experts else []
    details.append(f"global batch {workload.global_batch} x {workload.seq_len} tokens")
    if workload.documents > 1:
        details.append(f"{workload.documents} documents a row")
    details.append(f"{workload.micro_batch or 'all local'} row(s) per micro-batch")
    details.append(f"{workload.steps} timed steps after {workload.warmup} warm-up; median of {rounds}")
    threads = "; on CPU 1 process has 2 threads, the others 1 each" if device == "cpu" else ""
    print(
        f"\n== {name}: {model['model_type']} hidden {model['hidden_size']} x {model['num_hidden_layers']} layers, "
        f"{', '.join(details)}{threads}\n"
        "   MiB per rank (the largest rank): state = weights + grads + AdamW states"
        f"{' (experts: their part)' if experts else ''}; activ. = saved for backward in one micro-batch; "
        f"growth in forward + backward and peak of the run: {'RSS' if device == 'cpu' else 'allocated'}; "
        "ratios to 1 process"
    )
    base = medians.get("one")
    columns = ["tokens/s", "ratio", "state", "ratio", *(["experts"] if experts else []), "activ.", "ratio"]
    columns += ["growth", "peak"]
    print(f"{'layout':30s}" + "".join(f"{column:>10s}" for column in columns))

    def ratio(figures: dict[str, float], value: Any) -> str:
        return f"{value(figures) / value(base):.3f}" if base else "-"

    for layout, figures in medians.items():
        cells = [f"{figures['tokens_per_s']:,.0f}", ratio(figures, lambda f: f["tokens_per_s"])]
        cells += [mib(state(figures)), ratio(figures, state)]
        if experts:
            cells.append(mib(figures["expert_state_bytes"]))
        cells += [mib(figures["activation_bytes"]), ratio(figures, lambda f: f["activation_bytes"])]
        cells += [mib(figures["growth_bytes"]), mib(figures["peak_bytes"])]
        print(f"{LAYOUTS[layout].title:30s}" + "".join(f"{cell:>10s}" for cell in cells))
    if "ddp" in medians and "tp" in medians:
        print(f"tp=2 / DDP, state per rank: {state(medians['tp']) / state(medians['ddp']):.3f} (target <= 0.6)")
    if base and "cp" in medians:
        activations = medians["cp"]["activation_bytes"] / base["activation_bytes"]
        print(f"cp=2 / 1 process, activations per rank: {activations:.3f} (target <= 0.6)")


def main() -> None:
    """Alternate the layouts of every workload for ``--rounds`` rounds and print medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated: " + ", ".join(WORKLOADS))
    parser.add_argument("--layouts", default="", help="comma-separated subset of: " + ", ".join(LAYOUTS))
    parser.add_argument("--quick", action="store_true", help="tiny sizes and one round: a smoke run")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--worker", nargs=2, metavar=("WORKLOAD", "LAYOUT"), help=argparse.SUPPRESS)
    parser.add_argument("--sizes", choices=["cpu", "quick", "gpu"], help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = args.sizes or ("quick" if args.quick else "gpu" if args.device == "cuda" else "cpu")
    workloads = {"cpu": WORKLOADS, "quick": QUICK, "gpu": GPU}[sizes]
    if args.worker:
        worker(workloads, *args.worker, args.device, args.out)
        return
    rounds = 1 if args.quick else args.rounds
    chosen = [name for name in args.workloads.split(",") if name]
    wanted = set(filter(None, args.layouts.split(","))) or set(LAYOUTS)
    plan = [(name, layout) for name in chosen for layout in workloads[name].layouts if layout in wanted]
    if args.device == "cuda":
        import torch

        gpus = torch.cuda.device_count()
        skipped = sorted({layout for _, layout in plan if LAYOUTS[layout].processes > gpus})
        if skipped:
            print(f"{gpus} GPU(s): skipping {', '.join(LAYOUTS[layout].title for layout in skipped)}")
        plan = [(name, layout) for name, layout in plan if layout not in skipped]
    print(machine_summary(), flush=True)
    results: dict[tuple[str, str], list[dict[str, float]]] = {key: [] for key in plan}
    for round_index in range(rounds):
        for workload, layout in plan:
            figures = measure(workload, layout, sizes, args.device)
            results[workload, layout].append(figures)
            print(
                f"round {round_index + 1}: {workload} / {LAYOUTS[layout].title}: {figures['tokens_per_s']:,.0f} "
                f"tokens/s, activations {mib(figures['activation_bytes'])} MiB",
                flush=True,
            )
    for name in chosen:
        medians = {
            layout: {key: statistics.median(run[key] for run in runs) for key in runs[0]}
            for (workload, layout), runs in results.items()
            if workload == name
        }
        if medians:
            report(name, workloads[name], medians, rounds, args.device)


if __name__ == "__main__":
    main()
