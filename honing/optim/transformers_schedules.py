"""transformers' learning-rate schedules (``get_scheduler``'s step schedules) as pure functions of honing's step.

Each multiplier is the one transformers' ``LambdaLR`` applies, written with the same floating-point operations in
the same order as ``transformers.optimization`` (5.x), so that ``scheduler.semantics: transformers`` gives the LR a
Hugging Face ``Trainer`` run has at every optimizer step, bit for bit. The Trainer steps the optimizer, then the
scheduler: its optimizer step k (1-based, honing's ``step``) runs at the scheduler's step k - 1, so a warmup starts
at an LR of 0 and ``constant`` has none (transformers' ``constant`` ignores ``warmup_steps``).
"""

from __future__ import annotations

import math
from collections.abc import Callable


def transformers_lr_factor(
    step: int,
    *,
    name: str,
    max_steps: int,
    warmup_steps: int,
    base_lr: float | None = None,
    **kwargs: float,
) -> float:
    """transformers' multiplier of the base LR at honing's ``step`` (1-based); ``base_lr`` (``optim.lr``, the
    optimizer's default LR that ``polynomial`` and ``min_lr`` divide by); ``kwargs``: its ``lr_scheduler_kwargs``."""
    schedule = SCHEDULES.get(name)
    if schedule is None:
        raise ValueError(f"unknown transformers scheduler {name!r}: expected one of {', '.join(SCHEDULES)}")
    return schedule(step - 1, warmup_steps, max_steps, base_lr, **kwargs)


def transformers_warmup_steps(warmup_ratio: float, max_steps: int) -> int:
    """``TrainingArguments.get_warmup_steps`` for a ratio: ``ceil(steps x ratio)``, float noise and all."""
    return math.ceil(max_steps * warmup_ratio)


def _warmup(current: int, warmup: int) -> float:
    return float(current) / float(max(1, warmup))


def _linear(current: int, warmup: int, total: int, _base: float | None) -> float:
    if current < warmup:
        return _warmup(current, warmup)
    return max(0.0, float(total - current) / float(max(1, total - warmup)))


def _cosine(current: int, warmup: int, total: int, _base: float | None, num_cycles: float = 0.5) -> float:
    if current < warmup:
        return _warmup(current, warmup)
    progress = float(current - warmup) / float(max(1, total - warmup))
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress)))


def _cosine_with_restarts(current: int, warmup: int, total: int, _base: float | None, num_cycles: float = 1) -> float:
    if current < warmup:
        return _warmup(current, warmup)
    progress = float(current - warmup) / float(max(1, total - warmup))
    if progress >= 1.0:
        return 0.0
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * ((float(num_cycles) * progress) % 1.0))))


def _polynomial(
    current: int, warmup: int, total: int, base: float | None, lr_end: float = 1e-7, power: float = 1.0
) -> float:
    lr_init = _base_lr(base, "polynomial")
    if current < warmup:
        return _warmup(current, warmup)
    if current > total:
        return lr_end / lr_init
    lr_range = lr_init - lr_end
    decay_steps = total - warmup
    pct_remaining = 1 - (current - warmup) / decay_steps
    decay = lr_range * pct_remaining**power + lr_end
    return decay / lr_init


def _constant(_current: int, _warmup: int, _total: int, _base: float | None) -> float:
    return 1.0


def _constant_with_warmup(current: int, warmup: int, _total: int, _base: float | None) -> float:
    if current < warmup:
        return float(current) / float(max(1.0, warmup))
    return 1.0


def _inverse_sqrt(current: int, warmup: int, _total: int, _base: float | None, timescale: int | None = None) -> float:
    if timescale is None:
        timescale = warmup or 10_000
    if current < warmup:
        return _warmup(current, warmup)
    shift = timescale - warmup
    return 1.0 / math.sqrt((current + shift) / timescale)


def _min_lr_rate(base: float | None, name: str, min_lr: float | None, min_lr_rate: float | None) -> float:
    if min_lr is not None:
        return min_lr / _base_lr(base, name)
    if min_lr_rate is None:
        raise ValueError(f"transformers' {name!r} needs min_lr or min_lr_rate")
    return min_lr_rate


def _cosine_with_min_lr(
    current: int,
    warmup: int,
    total: int,
    base: float | None,
    num_cycles: float = 0.5,
    min_lr: float | None = None,
    min_lr_rate: float | None = None,
) -> float:
    rate = _min_lr_rate(base, "cosine_with_min_lr", min_lr, min_lr_rate)
    if current < warmup:
        return _warmup(current, warmup)
    progress = float(current - warmup) / float(max(1, total - warmup))
    factor = 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress))
    factor = factor * (1 - rate) + rate
    return max(0, factor)


def _cosine_warmup_with_min_lr(
    current: int,
    warmup: int,
    total: int,
    base: float | None,
    num_cycles: float = 0.5,
    min_lr: float | None = None,
    min_lr_rate: float | None = None,
    warmup_lr_rate: float | None = None,
) -> float:
    # transformers' variant whose warmup starts at 1/warmup_steps (or warmup_lr_rate) and whose decay ends on the
    # last step, all in floats
    rate = _min_lr_rate(base, "cosine_warmup_with_min_lr", min_lr, min_lr_rate)
    step, warmup_f, total_f = float(current), float(warmup), float(total)
    if step < warmup_f:
        if warmup_lr_rate is None:
            return (step + 1.0) / max(1.0, warmup_f)
        warmup_lr_rate = float(warmup_lr_rate)
        return warmup_lr_rate + (1.0 - warmup_lr_rate) * step / (max(1, warmup_f - 1))
    progress = (step - warmup_f + 1.0) / (max(1.0, total_f - warmup_f))
    factor = 0.5 * (1.0 + math.cos(math.pi * num_cycles * 2.0 * progress))
    factor = factor * (1 - rate) + rate
    return max(0, factor)


def _shape(kind: str, progress: float, num_cycles: float, *, warmup: bool) -> float:
    if kind == "linear":
        return progress if warmup else 1.0 - progress
    if kind == "cosine":
        if warmup:
            return 0.5 * (1.0 - math.cos(math.pi * progress))
        return 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress))
    return 1.0 - math.sqrt(1.0 - progress) if warmup else 1.0 - math.sqrt(progress)  # 1-sqrt


def _warmup_stable_decay(
    current: int,
    warmup: int,
    total: int | None,
    _base: float | None,
    num_stable_steps: int | None = None,
    num_decay_steps: int | None = None,
    warmup_type: str = "linear",
    decay_type: str = "cosine",
    min_lr_ratio: float = 0,
    num_cycles: float = 0.5,
) -> float:
    if num_decay_steps is None:
        raise ValueError("transformers' 'warmup_stable_decay' needs num_decay_steps")
    if num_stable_steps is None:
        if total is None:
            raise ValueError("transformers' 'warmup_stable_decay' needs num_stable_steps or the run's steps")
        num_stable_steps = total - warmup - num_decay_steps
    if current < warmup:
        progress = float(current) / float(max(1, warmup))
        factor = _shape(warmup_type, progress, num_cycles, warmup=True)
        factor = factor * (1.0 - min_lr_ratio) + min_lr_ratio
        return max(0.0, factor)
    if current < warmup + num_stable_steps:
        return 1.0
    if current < warmup + num_stable_steps + num_decay_steps:
        progress = float(current - warmup - num_stable_steps) / float(max(1, num_decay_steps))
        factor = _shape(decay_type, progress, num_cycles, warmup=False)
        factor = factor * (1.0 - min_lr_ratio) + min_lr_ratio
        return max(0.0, factor)
    return min_lr_ratio


def _base_lr(base: float | None, name: str) -> float:
    if base is None:
        raise ValueError(f"transformers' {name!r} needs the optimizer's base LR (optim.lr)")
    return base


#: ``SchedulerType`` value -> multiplier at the scheduler's (0-based) step
SCHEDULES: dict[str, Callable[..., float]] = {
    "linear": _linear,
    "cosine": _cosine,
    "cosine_with_restarts": _cosine_with_restarts,
    "polynomial": _polynomial,
    "constant": _constant,
    "constant_with_warmup": _constant_with_warmup,
    "inverse_sqrt": _inverse_sqrt,
    "cosine_with_min_lr": _cosine_with_min_lr,
    "cosine_warmup_with_min_lr": _cosine_warmup_with_min_lr,
    "warmup_stable_decay": _warmup_stable_decay,
}
