"""Preference tasks the project generates, so DPO examples run anywhere without downloads.

A source path ``generated:TASK`` (optionally ``?samples=N&seed=S``, as in ``honing.data.generated.tasks``) names one; it
is written once as a ``preference`` JSONL file (``messages`` + ``chosen`` + ``rejected``) in the cache folder.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from typing import Any

from honing.data.generated.tasks import PREFIX, samples_and_seed, write_rows_once
from honing.errors import DataError

# part of the cached file's name: bump it whenever a task's rows change
VERSION = 2


def _addition_preference(rng: random.Random) -> tuple[str, str, str]:
    """The right sum of two digits preferred over one that is off by 1 to 3 (never negative)."""
    a, b = rng.randint(0, 9), rng.randint(0, 9)
    wrong = a + b + rng.choice([-1, 1]) * rng.randint(1, 3)
    if wrong < 0:
        wrong = a + b + rng.randint(1, 3)
    return f"What is {a} + {b}?", str(a + b), str(wrong)


def _copy_preference(rng: random.Random) -> tuple[str, str, str]:
    """The letter asked for preferred over another one ("Copy: q": "q" over "d"): learnt from an untrained model."""
    letter, other = rng.sample("abcdefghijklmnopqrstuvwxyz", 2)
    return f"Copy: {letter}", letter, other


TASKS: dict[str, Callable[[random.Random], tuple[str, str, str]]] = {
    "addition_preference": _addition_preference,
    "copy_preference": _copy_preference,
}


def is_generated_preference(path: str) -> bool:
    """True for a ``generated:TASK`` path whose task is a preference task."""
    return path.startswith(PREFIX) and path[len(PREFIX) :].partition("?")[0] in TASKS


def generate_rows(task: str, *, samples: int, seed: int) -> list[dict[str, Any]]:
    """``samples`` preference rows of ``task``: the question, the right answer chosen, a wrong one rejected."""
    rng = random.Random(f"{task}:{seed}")  # string seeds are stable across Python runs
    rows = []
    for _ in range(samples):
        question, chosen, rejected = TASKS[task](rng)
        rows.append({"messages": [{"role": "user", "content": question}], "chosen": chosen, "rejected": rejected})
    return rows


def materialize(path: str, cache_dir: str) -> str:
    """Write the rows a ``generated:`` preference path names to a JSONL file under ``cache_dir`` (once); its path."""
    name, _, query = path[len(PREFIX) :].partition("?")
    if name not in TASKS:
        raise DataError(f"{path}: unknown generated preference task {name!r}; expected one of: {', '.join(TASKS)}")
    options = dict(part.split("=", 1) for part in query.split("&") if "=" in part)
    unknown = set(options) - {"samples", "seed"}
    if unknown or (query and not options):
        raise DataError(f"{path}: unknown option(s) {', '.join(sorted(unknown)) or query}; expected samples and seed")
    samples, seed = samples_and_seed(path, options)
    out = os.path.join(cache_dir, "generated", f"{name}-{samples}-{seed}-v{VERSION}.jsonl")
    return write_rows_once(out, lambda: generate_rows(name, samples=samples, seed=seed))
