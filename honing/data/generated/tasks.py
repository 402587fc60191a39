"""Tasks the project generates in code, so fine-tuning examples run anywhere without downloads.

A source path ``generated:TASK`` (optionally ``generated:TASK?samples=N&seed=S``) names one; it is
written once as a conversation-format JSONL file in the cache folder and read like any other file.
Different seeds give different examples, so ``seed=1`` makes a held-out set for ``seed=0``.
``generated:ocr`` (``honing.data.generated.ocr``) also writes images; it takes ``pdf=1``, ``blank=1`` and
``length=MIN-MAX`` besides.
"""

from __future__ import annotations

import functools
import json
import os
import random
import string
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl

from honing.cache import atomic_write
from honing.data.generated.ocr import OPTIONS as OCR_OPTIONS
from honing.data.generated.ocr import ocr_folder_name, ocr_settings, write_ocr_set
from honing.errors import DataError

PREFIX = "generated:"
OCR_TASK = "ocr"  # writes images too: honing.data.generated.ocr
DEFAULT_SAMPLES = 2000
# part of the cached file's name: bump it whenever a task's rows change, so old files are not reused
VERSION = 2


#: ``generated:reverse?letters=MIN-MAX``: the words' lengths (longer ones than SFT saw test generalisation)
REVERSE_LETTERS = (3, 8)


def _reverse(rng: random.Random, letters: tuple[int, int] = REVERSE_LETTERS) -> tuple[str, str]:
    word = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(*letters)))
    return f"Reverse the letters: {word}", word[::-1]


def _addition(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(0, 999), rng.randint(0, 999)
    return f"What is {a} + {b}?", str(a + b)


def _sort_digits(rng: random.Random) -> tuple[str, str]:
    digits = "".join(rng.choice(string.digits) for _ in range(rng.randint(3, 9)))
    return f"Sort these digits: {digits}", "".join(sorted(digits))


TASKS: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "reverse": _reverse,
    "addition": _addition,
    "sort_digits": _sort_digits,
}


#: options a task takes besides ``samples`` and ``seed``
TASK_OPTIONS: dict[str, tuple[str, ...]] = {"reverse": ("letters",), OCR_TASK: OCR_OPTIONS}


def is_generated(path: str) -> bool:
    """True for a ``generated:TASK`` source path."""
    return path.startswith(PREFIX)


def parse_generated(path: str) -> tuple[str, int, int]:
    """The task name, number of samples and seed a ``generated:`` path asks for."""
    name, samples, seed, _ = _parse(path)
    return name, samples, seed


def _parse(path: str) -> tuple[str, int, int, dict[str, str]]:
    """The task, samples, seed and the task's own options (``generated:ocr`` has some) of a path."""
    name, _, query = path[len(PREFIX) :].partition("?")
    if name not in TASKS and name != OCR_TASK:
        names = ", ".join(sorted([*TASKS, OCR_TASK]))
        raise DataError(f"{path}: unknown generated task {name!r}; expected one of: {names}")
    try:
        options = dict(parse_qsl(query, strict_parsing=bool(query)))
    except ValueError:
        raise DataError(f"{path}: options must read KEY=VALUE&KEY=VALUE, got {query!r}") from None
    allowed = ("samples", "seed") + TASK_OPTIONS.get(name, ())
    unknown = set(options) - set(allowed)
    if unknown:
        expected = f"{', '.join(allowed[:-1])} and {allowed[-1]}"
        raise DataError(f"{path}: unknown option(s) {', '.join(sorted(unknown))}; expected {expected}")
    samples, seed = samples_and_seed(path, options)
    extra = {key: value for key, value in options.items() if key not in ("samples", "seed")}
    if "letters" in extra:
        letters_range(path, extra["letters"])  # a bad range fails here, before any file is written
    return name, samples, seed, extra


def samples_and_seed(path: str, options: Mapping[str, str]) -> tuple[int, int]:
    """A generated path's ``samples`` (>= 1, default ``DEFAULT_SAMPLES``) and ``seed`` (default 0) options."""
    try:
        samples, seed = int(options.get("samples", DEFAULT_SAMPLES)), int(options.get("seed", 0))
    except ValueError as error:
        raise DataError(f"{path}: samples and seed must be integers ({error})") from None
    if samples < 1:
        raise DataError(f"{path}: samples must be >= 1, got {samples}")
    return samples, seed


def write_rows_once(out: str, rows: Callable[[], list[dict[str, Any]]]) -> str:
    """``out``, written as JSON Lines from ``rows()`` unless it exists (a generated set is made once per cache)."""
    if not os.path.exists(out):
        text = "".join(json.dumps(row) + "\n" for row in rows())
        atomic_write(out, lambda handle: handle.write(text.encode("utf-8")))
    return out


def letters_range(path: str, value: str) -> tuple[int, int]:
    """``letters=MIN-MAX`` (or ``letters=N``) as ``(MIN, MAX)``, 1 <= MIN <= MAX."""
    low, _, high = value.partition("-")
    try:
        bounds = (int(low), int(high or low))
    except ValueError:
        raise DataError(f"{path}: letters must read MIN-MAX (e.g. letters=8-10), got {value!r}") from None
    if not 1 <= bounds[0] <= bounds[1]:
        raise DataError(f"{path}: letters must satisfy 1 <= MIN <= MAX, got {value!r}")
    return bounds


def generate_rows(task: str, *, samples: int, seed: int, letters: tuple[int, int] | None = None) -> list[dict]:
    """``samples`` conversation rows of ``task``: the question from the user, the answer from the assistant
    (``letters``: the reverse task's word lengths)."""
    rng = random.Random(f"{task}:{seed}")  # string seeds are stable across Python runs
    make = TASKS[task] if letters is None else functools.partial(_reverse, letters=letters)
    rows = []
    for _ in range(samples):
        question, answer = make(rng)
        rows.append({"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]})
    return rows


def materialize(path: str, cache_dir: str) -> str:
    """Write the rows a ``generated:`` path names to a JSONL file under ``cache_dir`` (once); its path."""
    task, samples, seed, options = _parse(path)
    if task == OCR_TASK:
        settings = ocr_settings(path, options)
        folder = os.path.join(cache_dir, "generated", ocr_folder_name(samples, seed, **settings))
        return write_ocr_set(folder, samples=samples, seed=seed, **settings)
    letters = letters_range(path, options["letters"]) if "letters" in options else None
    lengths = f"-letters{letters[0]}-{letters[1]}" if letters else ""
    out = os.path.join(cache_dir, "generated", f"{task}-{samples}-{seed}{lengths}-v{VERSION}.jsonl")
    return write_rows_once(out, lambda: generate_rows(task, samples=samples, seed=seed, letters=letters))
