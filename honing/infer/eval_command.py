"""``honing eval MODEL_OR_RUN --tasks ...``: lm-evaluation-harness on a trained model; the results go to
``RUN/eval/harness/<task>.json`` and the run's ``metrics.jsonl``, and a table to the terminal."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import TextIO

from honing.errors import ConfigError
from honing.evaluate.harness import (
    HarnessSettings,
    flat_metrics,
    format_table,
    require_lm_eval,
    run_harness,
    task_results,
    write_results,
)
from honing.infer.model_source import ModelSource, load_model
from honing.json_lines import json_lines


def settings_from(args: argparse.Namespace) -> HarnessSettings:
    """The harness settings of a parsed ``honing eval`` command line (``--tasks a,b --tasks c``), checked."""
    tasks = tuple(task for item in args.tasks for task in item.split(",") if task)
    if not tasks:
        raise ConfigError("--tasks: no task given; give lm-eval task names or task YAML files, comma-separated")
    for option, value, least in (
        ("--batch-size", args.batch_size, 1),
        ("--num-fewshot", args.num_fewshot, 0),
        ("--max-new-tokens", args.max_new_tokens, 1),
    ):
        if value is not None and value < least:
            raise ConfigError(f"{option}: expected >= {least}, got {value}")
    if args.limit is not None and not args.limit > 0:  # lm-eval takes a fraction below 1, a count from 1
        raise ConfigError(f"--limit: expected a count of examples, or a fraction below 1, > 0; got {args.limit}")
    for folder in args.include:
        if not os.path.isdir(folder):
            raise ConfigError(f"--include: {folder} is not a folder (expected a folder of lm-eval task YAML files)")
    return HarnessSettings.read(args, tasks, apply_chat_template=args.chat_template, seed=args.seed)


def run_eval(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Carry out ``honing eval``; returns the exit code."""
    out = out or sys.stdout
    settings = settings_from(args)
    require_lm_eval("honing eval")
    loaded = load_model(args.model, device=args.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code)
    if loaded.is_vision:  # lm-eval's hf-multimodal backend would be the way; not wired here
        raise ConfigError(f"honing eval: {loaded.source.path} is a vision-language model; lm-eval runs text ones here")
    per_task = task_results(run_harness(loaded.model, loaded.tokenizer, settings))
    folder = args.output or loaded.source.run_folder or _local_folder(loaded.source)
    step = evaluated_step(loaded.source)
    paths = write_results(folder, per_task, step=step)
    tracked = ""
    if args.output is None and loaded.source.run_folder is not None:
        flat = flat_metrics(per_task)
        written = [
            append_metrics(loaded.source.run_folder, step, flat),
            log_tensorboard(loaded.source.run_folder, step, flat),
        ]
        tracked = " and " + ", ".join(path for path in written if path)
    out.write(format_table(per_task) + "\n")
    out.write(f"wrote {', '.join(paths)}{tracked}\n")
    return 0


def append_metrics(run_folder: str, step: int | None, metrics: dict[str, float]) -> str:
    """Append ``metrics`` to the run's ``metrics.jsonl`` as a line for ``step``. Readers keep the last line of a
    step, so the line repeats what that step's last line held (its losses stay visible). The file's path."""
    path = os.path.join(run_folder, "metrics.jsonl")
    previous: dict = {}
    if os.path.exists(path):
        for _, row in json_lines(path):
            if isinstance(row, dict) and row.get("step") == step:
                previous = row
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({**previous, "step": step, **metrics}) + "\n")
    return path


def log_tensorboard(run_folder: str, step: int | None, metrics: dict[str, float]) -> str | None:
    """The scalars into the run's TensorBoard folder when it logged there (``callbacks.tensorboard``); its path."""
    folder = os.path.join(run_folder, "tensorboard")
    if not os.path.isdir(folder):
        return None
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(log_dir=folder) as writer:
        for name, value in metrics.items():
            writer.add_scalar(name, value, global_step=step or 0)
    return folder


def _local_folder(source: ModelSource) -> str:
    if os.path.isdir(source.path):
        return source.path
    return os.getcwd()  # a hub model: results land in ./eval/harness


def evaluated_step(source: ModelSource) -> int | None:
    """The training step of the weights evaluated: a checkpoint's own, else the run's last logged step."""
    match = re.search(r"step(\d+)$", os.path.normpath(source.path))
    if source.kind == "checkpoint" and match:
        return int(match.group(1))
    if source.run_folder is None or os.path.basename(os.path.normpath(source.path)) != "hf":
        return None  # best/ (or a folder outside a run): which step it holds is not recorded beside it
    path = os.path.join(source.run_folder, "metrics.jsonl")
    if not os.path.exists(path):
        return None
    steps = [row.get("step") for _, row in json_lines(path) if isinstance(row, dict)]
    return max((step for step in steps if isinstance(step, int)), default=None)
