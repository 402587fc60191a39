"""``parallel.activation_checkpointing: auto`` (the default): recompute activations only when memory asks for it.

On CUDA the run's memory plan (``honing.plan``, the estimate ``honing plan`` prints) is made for the model as
built, and the least recomputation whose planned peak fits 90% of the GPU is taken: none, every second block
(``every_n``: half the saved activations for a third of full checkpointing's recomputation), then every block
(``full``; also when nothing fits: the run then starts and the planner's words are in the header). Checkpointing
costs a second forward of each checkpointed block (0.88x the steps' speed on an H100 at 0.5B, benchmarks/RESULTS.md),
so a run that fits pays nothing. On CPU ``auto`` is ``none``: host memory is not what the plan budgets for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from honing.plan.checkpointing_ladder import AUTO, HEADROOM, checkpointing_for_budget
from honing.plan.estimate import format_bytes
from honing.plan.from_config import plan_inputs

if TYPE_CHECKING:
    from honing.config import RunConfig


@dataclass(frozen=True)
class CheckpointingChoice:
    """The resolved ``parallel.activation_checkpointing`` and ``_every``, and the header's line (None: as set)."""

    mode: str
    every: int
    line: str | None = None


def choose_activation_checkpointing(
    config: RunConfig, *, device: torch.device, nproc: int, vocab_size: int | None = None
) -> CheckpointingChoice:
    """Resolve ``parallel.activation_checkpointing`` for a run of ``config`` on ``nproc`` processes on ``device``."""
    parallel = config.parallel
    if parallel.activation_checkpointing != AUTO:
        return CheckpointingChoice(parallel.activation_checkpointing, parallel.activation_checkpointing_every)
    if device.type != "cuda":
        return CheckpointingChoice("none", 2, f"parallel.activation_checkpointing: auto -> none ({device.type})")
    budget = torch.cuda.get_device_properties(device).total_memory
    try:
        plan, _ = plan_inputs(config, nproc=nproc, vocab_size=vocab_size)
    except Exception as error:  # a plan the estimator cannot make must not stop a run that may well fit
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        return CheckpointingChoice("none", 2, f"parallel.activation_checkpointing: auto -> none (no plan: {reason})")
    mode, every, result = checkpointing_for_budget(plan, budget)
    fits = "fits" if result.peak <= HEADROOM * budget else "does NOT fit even so"
    line = (
        f"parallel.activation_checkpointing: auto -> {mode} (planned peak {format_bytes(result.peak)} {fits} "
        f"{HEADROOM:.0%} of the GPU's {format_bytes(budget)}; set it to none / full / every_n to choose)"
    )
    return CheckpointingChoice(mode, every, line)
