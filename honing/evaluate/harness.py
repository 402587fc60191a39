"""Benchmarks through EleutherAI's lm-evaluation-harness on a model already in memory: its task names, or local
task YAML files (offline), results per task as JSON beside the run, as flat metrics, and as a table.

lm-eval is an optional extra (``pip install 'honing[eval]'``); nothing imports it until an evaluation runs.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import yaml

from honing.errors import ConfigError
from honing.evaluate.task_checks import check_tasks
from honing.models.generation import end_of_turn_ids

if TYPE_CHECKING:
    from lm_eval.tasks import TaskManager
    from transformers import PreTrainedTokenizerBase

EVAL_EXTRA = "pip install 'honing[eval]' (lm-eval and math-verify)"
#: where results go, under a run folder
RESULTS_FOLDER = os.path.join("eval", "harness")


def require_lm_eval(key: str) -> None:
    """One line naming the extra to install when lm-eval is missing."""
    try:
        import lm_eval  # noqa: F401
    except ImportError as error:
        raise ConfigError(f"{key}: needs lm-evaluation-harness ({error}); {EVAL_EXTRA}") from None


@dataclass(frozen=True)
class HarnessSettings:
    """What to evaluate and how: task names or YAML files, extra task folders, and lm-eval's options."""

    tasks: tuple[str, ...]
    include: tuple[str, ...] = ()
    limit: float | None = None  # examples per task (a fraction when < 1); None: all
    num_fewshot: int | None = None  # None: each task's own
    batch_size: int = 8
    max_new_tokens: int | None = None  # generation tasks' answer length; None: each task's own max_gen_toks
    apply_chat_template: bool | None = None  # None: when the tokenizer has a template
    seed: int = 0
    key: str = "--tasks"  # the option or config key the tasks came from, for error messages

    @classmethod
    def read(
        cls, source: object, tasks: Iterable[str], *, apply_chat_template: bool | None, seed: int, key: str = "--tasks"
    ) -> HarnessSettings:
        """The settings of ``tasks`` with lm-eval's options read off ``source`` by their names: a
        ``callbacks.harness_eval`` section or ``honing eval``'s parsed command line."""
        options = {name: getattr(source, name) for name in LM_EVAL_OPTIONS}
        options["include"] = tuple(options["include"])
        return cls(tuple(tasks), apply_chat_template=apply_chat_template, seed=seed, key=key, **options)


#: the options a harness section and ``honing eval`` name alike
LM_EVAL_OPTIONS = ("include", "limit", "num_fewshot", "batch_size", "max_new_tokens")


class _TaskYamlLoader(yaml.SafeLoader):
    """Reads lm-eval task files for their ``task`` name: its ``!function`` tags are kept as text."""


_TaskYamlLoader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))


def local_task_name(path: str, key: str) -> str:
    """The ``task:`` name of a task YAML file."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.load(handle, Loader=_TaskYamlLoader)  # noqa: S506 - a SafeLoader subclass
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"{key}: cannot read task file {path}: {error}") from None
    name = data.get("task") if isinstance(data, dict) else None
    if not isinstance(name, str):
        raise ConfigError(f"{key}: {path} has no `task: NAME` line (an lm-eval task YAML file)")
    return name


def task_manager(settings: HarnessSettings) -> tuple[TaskManager, list[str]]:
    """lm-eval's TaskManager over the local task folders (and its own tasks only when a name needs them), and the
    task names to run."""
    from lm_eval.tasks import TaskManager

    include, names = [os.path.abspath(p) for p in settings.include], []
    for task in settings.tasks:
        if task.endswith((".yaml", ".yml")) or os.path.isfile(task):
            if not os.path.isfile(task):
                raise ConfigError(f"{settings.key}: the task file {task} does not exist")
            include.append(os.path.dirname(os.path.abspath(task)))
            names.append(local_task_name(task, settings.key))
        else:
            names.append(task)
    include = list(dict.fromkeys(include))
    manager = TaskManager(include_path=include or None, include_defaults=False) if include else None
    if manager is None or any(name not in manager.all_tasks for name in names):
        manager = TaskManager(include_path=include or None)  # lm-eval's own tasks: indexing them takes seconds
    unknown = [name for name in names if name not in manager.all_tasks]
    if unknown:
        raise ConfigError(
            f"{settings.key}: unknown task(s) {', '.join(unknown)}: give lm-eval task names "
            "(`lm-eval ls tasks`) or task YAML files"
        )
    return manager, names


def run_harness(
    model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, settings: HarnessSettings
) -> dict[str, Any]:
    """Evaluate ``model`` (in memory, evaluation mode) on the tasks; lm-eval's results dictionary."""
    require_lm_eval(settings.key)
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM

    # its INFO lines per task and request are noise here; a level set higher (honing's CLI: ERROR) stays
    lm_eval_log = logging.getLogger("lm_eval")
    lm_eval_log.setLevel(max(lm_eval_log.getEffectiveLevel(), logging.WARNING))
    manager, names = task_manager(settings)
    template = settings.apply_chat_template
    if template is None:
        template = bool(getattr(tokenizer, "chat_template", None))
    device = next(model.parameters()).device
    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=settings.batch_size, device=str(device))
    length = settings.max_new_tokens
    check_tasks(manager, names, max_new_tokens=length, max_length=lm.max_length, tasks_key=settings.key)
    was_training = model.training
    model.eval()
    restore_stops = _stop_at_end_of_turn(model, tokenizer)
    try:
        with torch.random.fork_rng(devices=[]):  # an evaluation during training must not move its RNG
            results = simple_evaluate(
                model=lm,
                tasks=names,
                task_manager=manager,
                limit=settings.limit,
                num_fewshot=settings.num_fewshot,
                apply_chat_template=template,
                gen_kwargs={"max_gen_toks": settings.max_new_tokens} if settings.max_new_tokens else None,
                log_samples=False,
                random_seed=settings.seed,
                numpy_random_seed=settings.seed,
                torch_random_seed=settings.seed,
                fewshot_random_seed=settings.seed,
            )
    finally:
        restore_stops()
        model.train(was_training)
    if results is None:
        raise RuntimeError("lm-eval returned no results (it does so on ranks other than its own rank 0)")
    return dict(results)


def _stop_at_end_of_turn(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase) -> Callable[[], None]:
    """Make ``generate`` stop at the chat template's end-of-turn token, as honing's own generation does; returns
    what undoes it. lm-eval decodes answers without special tokens, so its ``until: ["<|im_end|>"]`` never sees
    the token, and an answer would run on past the end of its turn."""
    config = getattr(model, "generation_config", None)
    extra = end_of_turn_ids(tokenizer)
    if config is None or not extra:
        return lambda: None
    saved = config.eos_token_id
    current = [] if saved is None else ([saved] if isinstance(saved, int) else list(saved))
    config.eos_token_id = sorted({*current, *extra, *([tokenizer.eos_token_id] if tokenizer.eos_token_id else [])})

    def restore() -> None:
        config.eos_token_id = saved

    return restore


def task_results(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per task: its metrics (``name`` or ``name/filter``, standard errors apart), sample count, shots, version
    and the task config lm-eval ran."""
    out = {}
    for task, values in results.get("results", {}).items():
        metrics, stderr = {}, {}
        for key, value in values.items():
            if "," not in key or not isinstance(value, int | float):
                continue
            metric, _, filter_name = key.partition(",")
            target = stderr if metric.endswith("_stderr") else metrics
            name = metric.removesuffix("_stderr")
            target[name if filter_name == "none" else f"{name}/{filter_name}"] = float(value)
        out[task] = {
            "task": task,
            "metrics": metrics,
            "stderr": stderr,
            "samples": results.get("n-samples", {}).get(task, {}).get("effective"),
            "num_fewshot": results.get("n-shot", {}).get(task),
            "version": results.get("versions", {}).get(task),
            "higher_is_better": results.get("higher_is_better", {}).get(task, {}),
            "config": _jsonable(results.get("configs", {}).get(task, {})),
            "lm_eval_version": results.get("lm_eval_version"),
        }
    return out


def flat_metrics(per_task: dict[str, dict[str, Any]]) -> dict[str, float]:
    """``eval/harness/<task>/<metric>`` → value, for trackers and metrics.jsonl (finite values only)."""
    return {
        f"eval/harness/{task}/{name}": value
        for task, result in per_task.items()
        for name, value in result["metrics"].items()
        if math.isfinite(value)
    }


def write_results(folder: str, per_task: dict[str, dict[str, Any]], *, step: int | None = None) -> list[str]:
    """``FOLDER/eval/harness/<task>.json`` for every task (the latest evaluation; ``step`` says of which weights)."""
    target = os.path.join(folder, RESULTS_FOLDER)
    os.makedirs(target, exist_ok=True)
    paths = []
    for task, result in per_task.items():
        path = os.path.join(target, f"{task.replace('/', '_')}.json")
        with open(f"{path}.tmp", "w", encoding="utf-8") as handle:
            json.dump({**result, "step": step}, handle, indent=2)
        os.replace(f"{path}.tmp", path)
        paths.append(path)
    return paths


def format_table(per_task: dict[str, dict[str, Any]]) -> str:
    """The results as a Markdown table: task, metric, value (± standard error), samples."""
    lines = ["| task | metric | value | samples |", "| --- | --- | --- | --- |"]
    for task, result in per_task.items():
        for name, value in result["metrics"].items():
            err = result["stderr"].get(name)
            shown = f"{value:.4f}" + (f" ± {err:.4f}" if err is not None and math.isfinite(err) else "")
            lines.append(f"| {task} | {name} | {shown} | {result['samples']} |")
    return "\n".join(lines)


def read_results(folder: str) -> dict[str, dict[str, Any]]:
    """The results written under ``FOLDER/eval/harness`` (empty when there are none)."""
    target = os.path.join(folder, RESULTS_FOLDER)
    if not os.path.isdir(target):
        return {}
    out = {}
    for name in sorted(os.listdir(target)):
        if name.endswith(".json"):
            with open(os.path.join(target, name), encoding="utf-8") as handle:
                result = json.load(handle)
            out[result.get("task", name[:-5])] = result
    return out


def _jsonable(value: object) -> object:
    """``value`` with what JSON cannot hold (functions in task configs) as text."""
    return json.loads(json.dumps(value, default=str))
