"""Learning-rate schedules as pure functions of the step: easy to test, nothing to checkpoint."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from honing.config.optim_schema import SchedulerSection
from honing.errors import ConfigError
from honing.optim.transformers_schedules import transformers_lr_factor, transformers_warmup_steps


def lr_factor(
    step: int,
    *,
    name: str,
    max_steps: int,
    warmup_steps: int = 0,
    min_lr_ratio: float = 0.0,
    decay_fraction: float = 0.2,
    warmup_ratio: float | None = None,
    semantics: str = "honing",
    kwargs: Mapping[str, Any] | None = None,
    base_lr: float | None = None,
) -> float:
    """The multiplier of the base LR at ``step`` (1-based: the step being taken).

    ``constant``, ``linear`` (to ``min_lr_ratio`` at ``max_steps``), ``cosine`` (likewise), and
    ``wsd`` (warmup, stable, then a linear decay over the last ``decay_fraction`` of the steps).
    All start with a linear warmup from 1/warmup_steps to 1; ``warmup_ratio``, when given, sets
    ``warmup_steps`` to that share of ``max_steps`` (see ``warmup_steps_for``).

    ``semantics="transformers"``: ``name`` is a transformers schedule and the multiplier is exactly the one
    ``transformers.get_scheduler`` gives at that optimizer step (``honing.optim.transformers_schedules``), with
    ``kwargs`` its ``lr_scheduler_kwargs`` and ``base_lr`` the optimizer's LR (``optim.lr``).
    """
    if semantics == "transformers":
        if warmup_ratio is not None:
            warmup_steps = transformers_warmup_steps(warmup_ratio, max_steps)
        given = {key: value for key, value in (kwargs or {}).items() if value is not None}
        return transformers_lr_factor(
            step, name=name, max_steps=max_steps, warmup_steps=warmup_steps, base_lr=base_lr, **given
        )
    if warmup_ratio is not None:
        warmup_steps = warmup_steps_for(warmup_ratio, max_steps)
    if warmup_steps and step <= warmup_steps:
        return step / warmup_steps
    if name == "constant":
        return 1.0
    total = max(max_steps - warmup_steps, 1)
    progress = min(max(step - warmup_steps, 0) / total, 1.0)
    if name == "linear":
        return 1.0 - (1.0 - min_lr_ratio) * progress
    if name == "cosine":
        return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
    if name == "wsd":
        decay_steps = max(int(round(decay_fraction * max_steps)), 1)
        decay_start = max_steps - decay_steps
        if step <= decay_start:
            return 1.0
        decay_progress = min((step - decay_start) / decay_steps, 1.0)
        return 1.0 - (1.0 - min_lr_ratio) * decay_progress
    raise ValueError(f"unknown scheduler {name!r}: expected constant, linear, cosine or wsd")


def warmup_steps_for(warmup_ratio: float, max_steps: int) -> int:
    """Warmup steps for a share of the run, rounded up as Hugging Face's Trainer does (0.1 of 95 steps: 10).

    The product is rounded to 6 decimals first so that float noise (0.07 x 100 = 7.000000000000001) does not
    add a step."""
    return math.ceil(round(warmup_ratio * max_steps, 6))


def schedule_options(section: SchedulerSection, base_lr: float) -> dict[str, Any]:
    """The ``scheduler`` section as ``lr_factor``'s keyword arguments (``base_lr``: ``optim.lr``), checked against
    the optimizer's LR where transformers' schedules need it."""
    kwargs = section.kwargs
    if section.semantics == "transformers" and section.name == "polynomial":
        lr_end = 1e-7 if kwargs.lr_end is None else kwargs.lr_end
        if not base_lr > lr_end:  # transformers' own check, at the start rather than at its first step
            raise ConfigError(
                f"scheduler.kwargs.lr_end: {lr_end} must be below optim.lr ({base_lr}); lower lr_end or raise optim.lr"
            )
    return {
        "name": section.name,
        "semantics": section.semantics,
        "warmup_steps": section.warmup_steps,
        "warmup_ratio": section.warmup_ratio,
        "min_lr_ratio": section.min_lr_ratio,
        "decay_fraction": section.decay_fraction,
        "kwargs": kwargs.model_dump(),  # all handed on (None: transformers' default); honing's semantics refuses them
        "base_lr": base_lr,
    }
