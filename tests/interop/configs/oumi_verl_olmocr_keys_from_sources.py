"""Writes the key tables of Oumi's ``TrainingConfig``, verl's PPO trainer config and olmOCR's training config
(``honing/interop/configs/schema_keys/oumi.json``, ``verl.json``, ``olmocr.json``): every
key's name, type and default, read from the projects' own sources at one commit (none of them is installed here).

    python -m tests.interop.configs.oumi_verl_olmocr_keys_from_sources OUMI_GIT_DIR VERL_GIT_DIR OLMOCR_GIT_DIR

Oumi's and olmOCR's dataclasses are parsed with ``ast`` (``schema_keys_from_sources.fields``), an enum default
(``TrainerType.HF``) written as its member's value; verl's keys are the leaves of ``_generated_ppo_trainer.yaml``
(the composed ``ppo_trainer.yaml``, every dataclass of ``verl/trainer/config`` and ``verl/workers/config`` that
it instantiates flattened into it), without ``_target_``. The tables (``oumi_table.py``, ``verl_table.py``,
``olmocr_table.py``) must then name every key; ``test_oumi_schema_walk.py``, ``test_verl_schema_walk.py`` and
``test_olmocr_schema_walk.py`` check.
"""

from __future__ import annotations

import ast
import sys
from typing import Any

import yaml

from tests.interop.configs.schema_keys_from_sources import classes, fields, git_show, head, write

OUMI_PARAMS = "src/oumi/core/configs/params"
# Oumi's TrainingConfig tree: group -> (file under OUMI_PARAMS or the config's own, class)
OUMI_GROUPS = {
    "": ("../training_config.py", "TrainingConfig"),
    "model": ("model_params.py", "ModelParams"),
    "data": ("data_params.py", "DataParams"),
    "data.<split>": ("data_params.py", "DatasetSplitParams"),
    "data.<split>.datasets[]": ("data_params.py", "DatasetParams"),
    "training": ("training_params.py", "TrainingParams"),
    "training.grpo": ("grpo_params.py", "GrpoParams"),
    "training.gkd": ("gkd_params.py", "GkdParams"),
    "training.gold": ("gold_params.py", "GoldParams"),
    "training.profiler": ("profiler_params.py", "ProfilerParams"),
    "training.profiler.schedule": ("profiler_params.py", "ProfilerScheduleParams"),
    "training.telemetry": ("telemetry_params.py", "TelemetryParams"),
    "peft": ("peft_params.py", "PeftParams"),
    "fsdp": ("fsdp_params.py", "FSDPParams"),
    "deepspeed": ("deepspeed_params.py", "DeepSpeedParams"),
    "deepspeed.offload_optimizer": ("deepspeed_params.py", "OffloadConfig"),
    "deepspeed.offload_param": ("deepspeed_params.py", "OffloadConfig"),
}
VERL_YAML = "verl/trainer/config/_generated_ppo_trainer.yaml"
OLMOCR_CONFIG = "olmocr/train/config.py"
OLMOCR_GROUPS = {
    "": "Config",
    "model": "ModelConfig",
    "dataset": "DatasetConfig",
    "dataset.<split>[]": "DatasetItemConfig",
    "training": "TrainingConfig",
}


def enum_values(known: dict[str, ast.ClassDef]) -> dict[str, Any]:
    """``"Enum.MEMBER"`` -> the member's value, for every enum class of ``known`` whose members are literals."""
    values: dict[str, Any] = {}
    for name, node in known.items():
        if not any("Enum" in ast.unparse(base) for base in node.bases):
            continue
        for statement in node.body:
            if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Constant):
                for target in statement.targets:
                    if isinstance(target, ast.Name):
                        values[f"{name}.{target.id}"] = statement.value.value
    return values


def resolved(keys: dict[str, tuple[str, str]], enums: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """``keys`` with an enum default (``X.Y`` or ``X.Y.value``) written as its value's literal."""
    out = {}
    for key, (kind, default) in keys.items():
        member = default.removesuffix(".value")
        out[key] = (kind, repr(enums[member]) if member in enums else default)
    return out


def oumi(repo: str) -> dict[str, dict[str, tuple[str, str]]]:
    """Oumi's ``TrainingConfig`` keys, one group per nested dataclass."""
    known: dict[str, ast.ClassDef] = {}
    for file, _ in OUMI_GROUPS.values():
        path = f"{OUMI_PARAMS}/{file}".replace("params/../", "")
        known.update(classes(git_show(repo, path)))
    known.update(classes(git_show(repo, f"{OUMI_PARAMS}/base_params.py")))
    enums = enum_values(known)
    return {group: resolved(fields(name, known), enums) for group, (_, name) in OUMI_GROUPS.items()}


def leaves(values: dict[str, Any], prefix: str = "") -> dict[str, tuple[str, str]]:
    """A nested mapping's leaves as dotted keys -> (the YAML value's type, its value as Python source)."""
    out: dict[str, tuple[str, str]] = {}
    for key, value in values.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if key == "_target_":
            continue
        if isinstance(value, dict) and value:
            out.update(leaves(value, path))
        else:
            out[path] = (type(value).__name__ if value is not None else "None", repr(value))
    return out


def verl(repo: str) -> dict[str, dict[str, tuple[str, str]]]:
    """verl's PPO trainer keys, one group per top-level section (its keys dotted below it; ``""`` for top-level
    leaves)."""
    groups: dict[str, dict[str, tuple[str, str]]] = {}
    for path, value in leaves(yaml.safe_load(git_show(repo, VERL_YAML))).items():
        group, _, key = path.partition(".") if "." in path else ("", "", path)
        groups.setdefault(group, {})[key] = value
    return groups


def olmocr(repo: str) -> dict[str, dict[str, tuple[str, str]]]:
    """olmOCR's training config keys (``Config`` and its sections) and each pipeline step's keys
    (``pipeline[<step name>]``)."""
    known = classes(git_show(repo, OLMOCR_CONFIG))
    groups = {group: fields(name, known) for group, name in OLMOCR_GROUPS.items()}
    for name in known:
        if name.endswith("Config") and "PipelineStepConfig" in [ast.unparse(base) for base in known[name].bases]:
            step = fields(name, known)
            groups[f"pipeline[{ast.literal_eval(step['name'][1])}]"] = step
    return groups


def main(oumi_repo: str, verl_repo: str, olmocr_repo: str) -> None:
    """Write the three tables."""
    write("oumi", f"oumi-ai/oumi@{head(oumi_repo).strip()}", oumi(oumi_repo))
    groups = verl(verl_repo)
    groups["actor_rollout_ref"] = groups.pop("actor_rollout_ref")  # last: the page lists the other sections first
    write("verl", f"volcengine/verl@{head(verl_repo).strip()}", groups)
    write("olmocr", f"allenai/olmocr@{head(olmocr_repo).strip()}", olmocr(olmocr_repo))


if __name__ == "__main__":
    main(*sys.argv[1:4])
