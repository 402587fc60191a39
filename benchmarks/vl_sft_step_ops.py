"""Operator counts of honing's VL-SFT step by phase, at ``vl_sft_throughput.py``'s exact setting (its model, rows and
config): what this project's CPUs pay per operator call, counted rather than timed, so it can run on a busy machine.

honing's ``vl_sft`` recipe runs as ``vl_sft_throughput.py`` runs it; after ``--warmup`` steps, ``--steps`` steps run
under ``torch.profiler`` (or ``cProfile`` with ``--python``), each phase wrapped in a ``record_function``: collate,
micro-batches (the image processor and rope positions), the language model's forward, its vision tower, the head and
loss, backward, gradient clipping, the optimizer, zero_grads, the rest of train_batch / optim_step, and everything
else (trainer bookkeeping and callbacks). It prints per step the top-level aten calls of each phase (calls made
inside another aten call are counted apart, as nested), and the step's logged ``train/loss`` and ``optim/grad_norm``
with every digit, so that two trees' outputs show whether a change kept them bit for bit.

    .venv/bin/python benchmarks/vl_sft_step_ops.py [--warmup 3] [--steps 4] [--threads 1] [--python]

With ``--python``, ``SORT=cumtime`` (or any pstats key; default ``tottime``) and ``ROWS=70`` (default 25) order and
cut cProfile's table.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import functools
import os
import pstats
import tempfile
from collections.abc import Callable

import torch
import vl_sft_throughput as benchmark  # benchmarks/ is on sys.path when a script runs
from torch.autograd.profiler_util import FunctionEvent
from torch.profiler import ProfilerActivity, profile, record_function

PHASE = "phase:"
OTHER = "bookkeeping / callbacks"
LOGGED = ("train/loss", "optim/grad_norm", "train/target_tokens")


def labelled(name: str, function: Callable[..., object]) -> Callable[..., object]:
    """``function`` with its calls recorded as the phase ``name``."""

    @functools.wraps(function)
    def wrapper(*args: object, **kwargs: object) -> object:
        with record_function(PHASE + name):
            return function(*args, **kwargs)

    return wrapper


def phase_of(event: FunctionEvent) -> str:
    """The innermost phase an event ran in."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(PHASE):
            return parent.name[len(PHASE) :]
        parent = parent.cpu_parent
    return OTHER


def is_top_level(event: FunctionEvent) -> bool:
    """An aten call that no other aten call made."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return False
        parent = parent.cpu_parent
    return True


def print_counts(events: list[FunctionEvent], steps: int) -> None:
    """Top-level and nested aten calls per step, by phase, with the most frequent top-level ones."""
    top: collections.Counter[str] = collections.Counter()
    nested: collections.Counter[str] = collections.Counter()
    names: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for event in events:
        if not event.name.startswith("aten::"):
            continue
        phase = phase_of(event)
        nested[phase] += 1
        if is_top_level(event):
            top[phase] += 1
            names[phase][event.name[len("aten::") :]] += 1
    print(f"\nper step (mean of {steps}): phase, top-level aten calls, all aten calls, the most frequent")
    for phase in sorted(top, key=lambda name: -top[name]):
        common = ", ".join(f"{name} {count / steps:g}" for name, count in names[phase].most_common(8))
        print(f"  {phase:24s} {top[phase] / steps:7.1f} {nested[phase] / steps:8.1f}   {common}")
    print(f"  {'total':24s} {sum(top.values()) / steps:7.1f} {sum(nested.values()) / steps:8.1f}")


Profiler = cProfile.Profile | profile


def step_arguments(description: str | None) -> argparse.Namespace:
    """``--warmup``, ``--steps``, ``--threads`` and ``--python`` of a step-counting script."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--python", action="store_true", help="cProfile the steps instead (Python calls)")
    return parser.parse_args()


def step_profiler(args: argparse.Namespace) -> Profiler:
    """cProfile with ``--python``, else torch's profiler of CPU operators."""
    return cProfile.Profile() if args.python else profile(activities=[ProfilerActivity.CPU])


def profile_window(profiler: Profiler, step: int, first: int, last: int) -> None:
    """Start ``profiler`` at the end of step ``first``, stop it at the end of step ``last``."""
    if step == first:
        profiler.enable() if isinstance(profiler, cProfile.Profile) else profiler.__enter__()
    elif step == last:
        profiler.disable() if isinstance(profiler, cProfile.Profile) else profiler.__exit__(None, None, None)


def report(profiler: Profiler, logged: list[tuple[int, dict[str, float]]], steps: int) -> None:
    """Each step's logged metrics with every digit, then the counts (``print_counts``) or cProfile's top calls."""
    for step, metrics in logged:
        print(f"step {step}: " + ", ".join(f"{key} {value!r}" for key, value in metrics.items()))
    if isinstance(profiler, cProfile.Profile):
        stats = pstats.Stats(profiler)
        print(f"Python calls per step: {stats.total_calls / steps:.0f}")  # type: ignore[attr-defined]
        stats.sort_stats(os.environ.get("SORT", "tottime")).print_stats(int(os.environ.get("ROWS", 25)))
        return
    print_counts(list(profiler.events()), steps)


def main() -> None:
    args = step_arguments(__doc__)

    from honing.config.loading import validate
    from honing.distributed import prepare_training_environment, teardown_training_environment
    from honing.recipes.vl_sft import VLSFTRecipe
    from honing.train import Callback

    first, last = args.warmup, args.warmup + args.steps
    profiler = step_profiler(args)
    logged: list[tuple[int, dict[str, float]]] = []

    class Probe(Callback):
        def on_step_end(self) -> None:
            profile_window(profiler, self.step, first, last)

        def on_log(self, step: int, metrics: dict[str, float]) -> None:
            logged.append((step, {key: metrics[key] for key in LOGGED if key in metrics}))

    class ProbedRecipe(VLSFTRecipe):
        def build_callbacks(self, parts):
            return {**super().build_callbacks(parts), "step_ops_probe": Probe()}

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as folder:
        model_dir, rows = benchmark.prepare_assets(folder, samples=last * benchmark.BATCH)
        config = benchmark.honing_config(os.path.join(folder, "run"), model_dir, rows, last, args.threads)
        recipe = ProbedRecipe(validate(config))
        prepare_training_environment(seed=benchmark.SEED)
        trainer = recipe.build()
        module = recipe.train_module
        loader = trainer.progress.data_loader
        loader.collate_fn = labelled("collate", loader.collate_fn)
        for name in ("micro_batches", "zero_grads", "train_batch", "optim_step", "forward"):
            setattr(module, name, labelled(name.replace("forward", "forward (LM)"), getattr(module, name)))
        module.updater.clip_grad_norm = labelled("clip", module.updater.clip_grad_norm)
        module.optimizer.step = labelled("optimizer", module.optimizer.step)
        visual = recipe.model.model.visual
        visual.forward = labelled("vision tower", visual.forward)
        import honing.methods.lm as lm

        lm.linear_cross_entropy_sum = labelled("head + loss", lm.linear_cross_entropy_sum)
        torch.Tensor.backward = labelled("backward", torch.Tensor.backward)
        trainer.fit()
        teardown_training_environment()

    report(profiler, logged, args.steps)


if __name__ == "__main__":
    main()
