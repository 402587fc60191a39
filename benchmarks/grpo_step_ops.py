"""Operator counts of honing's GRPO step by phase, at ``grpo_throughput.py``'s exact setting (its model, tokenizer,
prompts, reward and train module): counted rather than timed, so it can run on a busy machine.

honing's GRPO train module runs as ``grpo_throughput.py`` runs it; after ``--warmup`` steps, ``--steps`` steps run
under ``torch.profiler`` (or ``cProfile`` with ``--python``), each phase wrapped in a ``record_function``: sampling
(the decoder), decoding the texts, the rewards, the advantages, the rollout metrics, the log-prob forward, the loss,
its clip / KL sums (``LossStats``), the loss metrics, backward, gradient clipping, the optimizer, the rest of
train_batch / optim_step, and everything else (trainer bookkeeping and callbacks). It prints per step the top-level
aten calls of each phase (``vl_sft_step_ops.report``), and each step's logged ``train/`` and ``optim/`` metrics
with every digit, so that two trees' outputs show whether a change kept them bit for bit.

    .venv/bin/python benchmarks/grpo_step_ops.py [--warmup 3] [--steps 4] [--threads 1] [--python]
"""

from __future__ import annotations

import grpo_throughput as benchmark  # benchmarks/ is on sys.path when a script runs
import torch
from vl_sft_step_ops import labelled, profile_window, report, step_arguments, step_profiler

#: (module, owner's attribute path, name, phase)
PHASES = (
    ("honing.methods.grpo_rollouts", "", "sample_completions", "sampling"),
    ("honing.methods.grpo_rollouts", "GroupSampler", "transcripts", "decode texts"),
    ("honing.rl.rewards", "RewardScorer", "score", "rewards"),
    ("honing.methods.grpo", "GRPOTrainModule", "score_rollouts", "advantages"),
    ("honing.methods.grpo_metrics", "RolloutMetrics", "rollouts", "rollout metrics"),
    ("honing.methods.grpo_logps", "CompletionLogps", "__call__", "log-prob forward"),
    ("honing.methods.grpo_policy_loss", "PolicyLoss", "per_token", "loss"),
    ("honing.methods.grpo", "", "grpo_loss_sum", "loss"),
    ("honing.methods.grpo_loss_stats", "LossStats", "add", "loss stats"),
    ("honing.methods.grpo_metrics", "RolloutMetrics", "loss_stats", "loss metrics"),
    ("honing.methods.optimizer_update", "OptimizerUpdate", "clip_grad_norm", "clip"),
    ("honing.methods.grpo", "GRPOTrainModule", "train_batch", "train_batch (rest)"),
    ("honing.methods.base", "BaseTrainModule", "optim_step", "optim_step (rest)"),
    ("honing.methods.base", "BaseTrainModule", "zero_grads", "zero_grads"),
)


def label_phases() -> None:
    """Wrap every phase's function in its ``record_function`` (before ``grpo_throughput`` wraps the sampler)."""
    import importlib

    for module_name, owner, name, phase in PHASES:
        module = importlib.import_module(module_name)
        target = getattr(module, owner) if owner else module
        setattr(target, name, labelled(phase, getattr(target, name)))
    torch.Tensor.backward = labelled("backward", torch.Tensor.backward)
    torch.optim.AdamW.step = labelled("optimizer", torch.optim.AdamW.step)


def main() -> None:
    args = step_arguments(__doc__)
    import honing.train.callbacks.gc as gc_callbacks

    first, last = args.warmup, args.warmup + args.steps
    profiler = step_profiler(args)
    logged: list[tuple[int, dict[str, float]]] = []

    class ProbedGC(gc_callbacks.GarbageCollectorCallback):
        """grpo_throughput's GC callback, which also starts and stops the profiler and keeps the logged metrics."""

        def on_step_end(self) -> None:
            super().on_step_end()
            profile_window(profiler, self.step, first, last)

        def on_log(self, step: int, metrics: dict[str, float]) -> None:
            logged.append((step, {k: v for k, v in sorted(metrics.items()) if k.startswith(("train/", "optim/"))}))

    gc_callbacks.GarbageCollectorCallback = ProbedGC  # the class run_honing builds its callbacks from
    label_phases()
    torch.set_num_threads(args.threads)
    benchmark.run_honing(first, args.steps)
    report(profiler, logged, args.steps)


if __name__ == "__main__":
    main()
