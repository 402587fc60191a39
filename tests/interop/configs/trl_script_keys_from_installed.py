"""Writes ``honing/interop/configs/schema_keys/trl_script.json``: every field of the dataclasses TRL's CLI reads beside
a trainer's config (``trl sft --config FILE``: ``ScriptArguments``, ``ModelConfig``, ``DatasetMixtureConfig`` and its
``DatasetConfig`` items; ``trl grpo`` / ``trl rloo``: the reward fields of their script's arguments), with its type and
default, read with ``dataclasses.fields`` from the installed TRL (a development dependency).

    .venv/bin/python tests/interop/configs/trl_script_keys_from_installed.py

``trl_cli_table.py`` must then give every key a verdict, which ``test_trl_cli.py`` checks.
"""

from __future__ import annotations

import importlib
import warnings
from pathlib import Path

from honing.interop.configs.key_tables import FOLDER, KeyTable, table_json
from tests.interop.configs.trl_keys_from_installed import dataclass_fields

OUT = Path(__file__).resolve().parents[3] / "honing" / "interop" / "configs" / FOLDER / "trl_script.json"
# group -> (module, class); GRPO's and RLOO's script arguments are ScriptArguments plus the same reward fields
CLASSES = {
    "ScriptArguments": ("trl", "ScriptArguments"),
    "ModelConfig": ("trl", "ModelConfig"),
    "DatasetMixtureConfig": ("trl", "DatasetMixtureConfig"),
    "DatasetConfig": ("trl.scripts.utils", "DatasetConfig"),
    "GRPOScriptArguments": ("trl.scripts.grpo", "GRPOScriptArguments"),
    "RLOOScriptArguments": ("trl.scripts.rloo", "RLOOScriptArguments"),
}


def groups() -> dict[str, dict[str, tuple[str, str]]]:
    """Each class's fields; GRPO's and RLOO's script arguments: only those ``ScriptArguments`` lacks."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = {
            group: dataclass_fields(getattr(importlib.import_module(module), name))
            for group, (module, name) in CLASSES.items()
        }
    for group in ("GRPOScriptArguments", "RLOOScriptArguments"):
        found[group] = {key: value for key, value in found[group].items() if key not in found["ScriptArguments"]}
    return found


def main() -> None:
    """Write the table."""
    trl = importlib.import_module("trl").__version__
    OUT.write_text(table_json(KeyTable(f"trl {trl}", groups())))


if __name__ == "__main__":
    main()
