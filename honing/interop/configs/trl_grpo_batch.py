"""TRL's GRPO batch as honing's keys. TRL counts completions per device and its steps are optimizer steps; honing
counts prompts per rank and its GRPO steps are rollout batches (one generation each, several optimizer steps).

TRL (``GRPOConfig.__post_init__``, ``GRPOTrainer._prepare_inputs``): an optimizer step trains on
``per_device_train_batch_size x processes x gradient_accumulation_steps`` completions, i.e. that / ``num_generations``
prompts; a generation samples ``per_device_train_batch_size x processes x steps_per_generation`` completions
(``steps_per_generation`` counts per-device batches, default ``gradient_accumulation_steps``) and is trained on for
``steps_per_generation x num_iterations`` per-device batches: that / ``gradient_accumulation_steps`` optimizer steps.
honing's ``data.batch_size_per_rank`` (prompts) makes the global batch follow the processes of the run, as TRL's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from honing.interop.configs.translation import Translation

# TRL's GRPOConfig default: completions per prompt
TRL_NUM_GENERATIONS = 8
# the honing keys that count steps, and the TRL keys they come from (those count optimizer steps)
STEP_INTERVALS = (
    ("callbacks.checkpointer.save_interval", "save_steps"),
    ("callbacks.evaluator.interval", "eval_steps"),
    ("callbacks.console.log_interval", "logging_steps"),
)


@dataclass(frozen=True)
class GRPOBatch:
    """One honing GRPO step as TRL's keys ask for it."""

    prompts_per_rank: int
    """``data.batch_size_per_rank``: the prompts one rank samples per rollout batch (G completions each)."""
    micro_prompts: int | None
    """``data.micro_batch_size``: TRL's per-device forward in prompts; None where it is not whole groups."""
    steps_per_generation: int
    """``grpo.steps_per_generation``: optimizer steps each rollout batch is cut into."""
    updates: int
    """Optimizer steps per honing step: ``steps_per_generation x num_iterations`` (TRL's steps per honing step)."""
    micro_completions: int | None = None
    """``grpo.micro_batch_completions``: TRL's per-device forward where it is not whole groups (a group then spans
    forward passes, as in TRL); None where ``micro_prompts`` says it."""
    completions_per_rank: int | None = None
    """``grpo.completions_per_rank``: a rank's completions per generation where they are not whole groups (a group
    then spans ranks, as TRL's RepeatSampler spreads it; the launch checks the world size makes whole groups); None:
    ``prompts_per_rank`` says the batch."""


def trl_grpo_batch(
    t: Translation,
    keys: dict[str, str],
    *,
    per_device: int,
    accumulation: int,
    generations: int,
    steps_per_generation: int | None = None,
    num_iterations: int = 1,
) -> GRPOBatch | None:
    """TRL's batch keys as one honing step, or None with one refusal line naming the key and the fix (``keys``:
    the foreign names of ``per_device``, ``accumulation``, ``generations``, ``steps_per_generation``)."""
    spg = accumulation if steps_per_generation is None else steps_per_generation
    if spg < accumulation and (accumulation % spg or num_iterations > 1):
        # TRL then samples accumulation / spg generations per optimizer step; with the same weights (no update
        # between them) that is one generation of the whole step, which honing samples; μ > 1 reuses a generation
        # inside one step's accumulation, which honing has no form for
        t.refuse(
            keys["steps_per_generation"],
            f"{spg} with {keys['accumulation']} {accumulation}"
            + (f" and num_iterations {num_iterations}" if num_iterations > 1 else "")
            + f": give a multiple of {accumulation} (honing's generations span whole optimizer steps)",
        )
        return None
    if spg % accumulation and spg > accumulation:
        t.refuse(
            keys["steps_per_generation"],
            f"{spg} must be a multiple of {keys['accumulation']} ({accumulation}): honing's generations span whole "
            f"optimizer steps (TRL trains {spg} / {accumulation} of them per generation)",
        )
        return None
    spg = max(spg, accumulation)  # per-device batches per generation
    completions = per_device * spg
    steps = spg // accumulation
    if completions % generations:  # a group spans ranks, as TRL's RepeatSampler lays it out
        return GRPOBatch(0, None, steps, steps * num_iterations, per_device, completions)
    micro = per_device // generations if per_device % generations == 0 else None
    return GRPOBatch(completions // generations, micro, steps, steps * num_iterations, None if micro else per_device)


def translate_trl_grpo_batch(
    t: Translation, keys: dict[str, str], *, given: bool, whose: str, section: str = "grpo", **batch: Any
) -> int:
    """``trl_grpo_batch`` written as honing's keys (``set_grpo_batch``); the optimizer steps of one honing step
    (1 when refused)."""
    grpo_batch = trl_grpo_batch(t, keys, **batch)
    if grpo_batch is None:
        return 1
    completions, group = grpo_batch.completions_per_rank, f"{keys['generations']} ({batch['generations']})"
    if completions is not None and section != "grpo":
        t.refuse(
            keys["per_device"],
            f"{completions} completions per rank per generation are part of a group of {group}: honing's {section} "
            f"samples a prompt's whole group on one rank; give a multiple of {batch['generations']}",
        )
        return 1
    if completions is not None:
        t.note(
            keys["per_device"],
            f"{completions} completions per rank per generation are part of a group of {group}: "
            f"grpo.completions_per_rank {completions}, the group spread over ranks as TRL's; the launch checks that "
            "the world size makes whole groups",
        )
    set_grpo_batch(t, grpo_batch, given, whose, section)
    return grpo_batch.updates


def set_grpo_batch(t: Translation, batch: GRPOBatch, given: bool, whose: str, section: str = "grpo") -> None:
    """Write ``batch`` as honing's keys (the file's own values, or ``whose`` defaults when it gives no batch;
    ``section``: ``grpo`` or ``rloo``)."""
    values = {"data.batch_size_per_rank": batch.prompts_per_rank, "data.micro_batch_size": batch.micro_prompts}
    if batch.completions_per_rank is not None:  # the batch in completions (GRPO's): no data batch key beside it
        values = {"data.batch_size_per_rank": None, "data.micro_batch_size": None, "data.global_batch_size": None}
        values["grpo.completions_per_rank"] = batch.completions_per_rank
    values[f"{section}.steps_per_generation"] = batch.steps_per_generation if batch.steps_per_generation > 1 else None
    if section == "grpo":  # RLOO's forward passes hold whole groups
        values["grpo.micro_batch_completions"] = batch.micro_completions
    for path, value in values.items():
        if value is None:  # honing's own: the rank's share in one pass; one optimizer step per rollout batch
            t.unset(path)
            continue
        if given:
            t.set(path, value)
        else:
            t.default(path, value, whose)


def steps_as_rollout_batches(t: Translation, updates: int, prefix: str, why: str) -> None:
    """TRL's step counts (optimizer steps) as honing's (rollout batches of ``updates`` optimizer steps each): the
    duration and the warmup exactly (refused in one line when not a multiple), the intervals rounded up; ``why``:
    the foreign key that makes a generation several optimizer steps, noted once."""
    if updates == 1:
        return
    duration = t.get("trainer.max_duration")
    if isinstance(duration, str) and duration.endswith("steps"):
        steps = int(duration[: -len("steps")])
        if steps % updates:
            t.refuse(
                f"{prefix}max_steps",
                f"{steps} optimizer steps must be a multiple of the {updates} each generation trains (honing's "
                f"steps are rollout batches); set it to {math.ceil(steps / updates) * updates}",
            )
        else:
            t.set("trainer.max_duration", f"{steps // updates}steps")
    warmup = t.get("scheduler.warmup_steps")
    if warmup:
        if warmup % updates:
            t.refuse(
                f"{prefix}warmup_steps",
                f"{warmup} optimizer steps must be a multiple of the {updates} each generation trains (honing's "
                f"schedule steps once per rollout batch); set it to {math.ceil(warmup / updates) * updates} or "
                "give warmup_ratio",
            )
        else:
            t.set("scheduler.warmup_steps", warmup // updates)
    for path, name in STEP_INTERVALS:
        value = t.get(path)
        if not value:
            continue
        scaled = max(1, math.ceil(value / updates))
        if path in t.defaults:
            t.default(path, scaled, f"{t.defaults[path]} / {updates} optimizer steps per rollout batch")
        else:
            t.set(path, scaled)
        if value % updates:
            t.note(f"{prefix}{name}", f"{value} optimizer steps: every {scaled} rollout batches ({updates} each)")
    t.note(
        why,
        f"each honing step is one generation trained on for {updates} optimizer steps: max_steps, warmup and the "
        "intervals count rollout batches, and the LR is set once per rollout batch (TRL's at each optimizer step)",
    )


def generation_batch_as_steps(
    values: dict[str, Any], class_default: Callable[[str], Any], processes: int | None
) -> tuple[int | None, str | None]:
    """TRL's ``generation_batch_size`` (completions per generation over all processes) popped from ``values`` (a
    GRPOConfig / RLOOConfig's arguments) and replaced by the ``steps_per_generation`` ``GRPOConfig.__post_init__``
    derives from it on ``processes`` processes: ``(that, None)``; ``(None, the refusal line)`` where TRL raises, or
    where the processes are not known (the per-device batches of one generation depend on them)."""
    size = values.pop("generation_batch_size", None)
    if size is None:
        return None, None
    per_device = values.get("per_device_train_batch_size") or class_default("per_device_train_batch_size")
    generations = values.get("num_generations") or class_default("num_generations")
    if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in (size, per_device, generations)):
        return None, f"{size!r}: expected a positive number of completions"
    if values.get("steps_per_generation") is not None:  # TRL: mutually exclusive
        return None, "and steps_per_generation can not both be given (TRL's rule): give one of them"
    if size % generations:
        return None, f"{size} must be divisible by num_generations ({generations}), as TRL requires"
    if processes is None:
        return None, (
            f"{size}: its per-device batches per generation depend on the processes, which this file does not give; "
            f"give steps_per_generation ({size} / ({per_device} per device x processes)), or num_processes beside it"
        )
    if size % (per_device * processes):
        return None, (
            f"{size} must be divisible by the global batch size ({per_device} per device x {processes} processes = "
            f"{per_device * processes}), as TRL requires"
        )
    values["steps_per_generation"] = size // (per_device * processes)
    return values["steps_per_generation"], None


def trl_generation_keys(values: Any) -> tuple[Any, Any]:
    """``(steps_per_generation, num_iterations)`` of TRL's GRPOConfig arguments ``values`` (a mapping or None)."""
    if not isinstance(values, dict):
        return None, None
    return values.get("steps_per_generation"), values.get("num_iterations")
