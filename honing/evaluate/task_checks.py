"""The tasks of an evaluation checked before lm-evaluation-harness runs them, each mistake one line naming the option
or key to change: a generation task whose answer length leaves no room for a prompt in the model's context (lm-eval
asserts ``max_gen_toks < max_length`` only when it reaches the request, and during training only after the run has
trained up to its first evaluation), and a local data file that is not there."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from honing.errors import ConfigError

if TYPE_CHECKING:
    from lm_eval.tasks import TaskManager

#: lm-eval's answer length for a generation task whose ``generation_kwargs`` set none (``HFLM.max_gen_toks``)
DEFAULT_MAX_GEN_TOKS = 256
#: the names lm-eval reads an answer length from, in its order (``normalize_gen_kwargs``)
LENGTH_NAMES = ("max_gen_toks", "max_new_tokens", "max_tokens", "max_completion_tokens")


def check_tasks(
    manager: TaskManager, names: Iterable[str], *, max_new_tokens: int | None, max_length: int, tasks_key: str
) -> None:
    """Refuse what lm-eval would fail on part way: see the module's docstring. ``max_new_tokens``: the answer length
    given for every generation task (None: each task's own); ``max_length``: the model's positions as lm-eval reads
    them; ``tasks_key``: the option or config key the tasks came from."""
    index = getattr(manager, "task_index", None)
    if not isinstance(index, dict):  # an lm-eval whose index has another shape: its own errors remain
        return
    tasks = sorted(reached_tasks(index, names).items())
    for task, config in tasks:  # the model's limits first: they hold wherever the data is
        if config.get("output_type") == "generate_until":
            check_answer_length(task, config, max_new_tokens, max_length, tasks_key)
    for task, config in tasks:
        check_data_files(task, config, tasks_key)


def reached_tasks(index: dict[str, Any], names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The config of every task that ``names`` reach in lm-eval's task index, groups and tags followed to their
    tasks; a group's own settings for a member are applied. Tasks defined in Python (no config) are left out."""
    found: dict[str, dict[str, Any]] = {}
    seen: set[str] = set()
    pending: list[Any] = list(names)
    while pending:
        item = pending.pop()
        name = item.get("task") if isinstance(item, dict) else item
        if not isinstance(name, str) or name in seen or name not in index:
            continue
        seen.add(name)
        entry = index[name]
        kind = getattr(getattr(entry, "kind", None), "name", "")
        config = getattr(entry, "cfg", None) or {}
        if kind == "GROUP":
            members = config.get("task")
            pending.extend(members if isinstance(members, list) else [members])
        elif kind == "TAG":
            pending.extend(sorted(getattr(entry, "tags", ()) or ()))
        elif kind == "TASK":
            found[name] = {**config, **(item if isinstance(item, dict) else {}), "_yaml_path": entry.yaml_path}
    return found


def length_key(tasks_key: str) -> str:
    """The option or config key of the answer length beside the tasks' (``--tasks``: ``--max-new-tokens``;
    ``callbacks.harness_eval.tasks``: ``callbacks.harness_eval.max_new_tokens``)."""
    if tasks_key.startswith("--"):
        return "--max-new-tokens"
    section, _, _ = tasks_key.rpartition(".")
    return f"{section}.max_new_tokens" if section else "max_new_tokens"


def task_answer_length(config: dict[str, Any]) -> int:
    """The answer length of a generation task's config: its ``generation_kwargs``' own, else lm-eval's default."""
    kwargs = config.get("generation_kwargs") or {}
    for name in LENGTH_NAMES:
        if isinstance(kwargs.get(name), int):
            return kwargs[name]
    return DEFAULT_MAX_GEN_TOKS


def check_answer_length(
    task: str, config: dict[str, Any], max_new_tokens: int | None, max_length: int, tasks_key: str
) -> None:
    """Refuse a generation task whose answers would take every one of the model's ``max_length`` positions."""
    length = max_new_tokens if max_new_tokens is not None else task_answer_length(config)
    if length < max_length:
        return
    key = length_key(tasks_key)
    given = f"{length} new tokens" if max_new_tokens is not None else f"task {task}'s answers of {length} tokens"
    raise ConfigError(
        f"{key}: {given} leave no room for a prompt in the model's {max_length} positions"
        + (f" (task {task})" if max_new_tokens is not None else "")
        + f"; give {key} below {max_length}, e.g. {max(1, max_length // 2)}"
    )


def local_data_files(config: dict[str, Any]) -> list[str]:
    """The plain local paths among a task's ``dataset_kwargs.data_files`` (a path, a list, or one per split);
    globs and URLs are left to the datasets library."""
    files = (config.get("dataset_kwargs") or {}).get("data_files")
    values = list(files.values()) if isinstance(files, dict) else [files]
    paths = [path for value in values for path in (value if isinstance(value, list) else [value])]
    return [p for p in paths if isinstance(p, str) and "://" not in p and not any(c in p for c in "*?[")]


def check_data_files(task: str, config: dict[str, Any], tasks_key: str) -> None:
    """Refuse a task whose local data file is missing: where the datasets library looks for it (this folder, or
    the task's local ``dataset_path`` folder or ``data_dir``), it is in none."""
    kwargs = config.get("dataset_kwargs") or {}
    bases = [base for base in (config.get("dataset_path"), kwargs.get("data_dir")) if isinstance(base, str)]
    for path in local_data_files(config):
        if not any(os.path.exists(os.path.join(base, path)) for base in ["", *bases]):
            where = f" in {config['_yaml_path']}" if config.get("_yaml_path") else ""
            raise ConfigError(
                f"{tasks_key}: task {task} reads {path} (dataset_kwargs.data_files{where}), which does not exist "
                f"here; relative paths are read from the current folder {os.getcwd()}"
            )
