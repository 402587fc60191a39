"""Writes ``honing/interop/configs/schema_keys/trl.json``: every field of transformers' ``TrainingArguments`` and of
TRL's config classes (``MODULES``), its type and default, read with ``dataclasses.fields`` from the installed
packages (neither is imported by honing at run time: TRL is a development dependency).

    .venv/bin/python tests/interop/configs/trl_keys_from_installed.py

A class's group holds its own fields and the ``TrainingArguments`` fields whose default it changes; the verdict
tables (``hf_training_args_table.py``, ``trl_*_table.py``) must then name every key, which
``test_trl_schema_walk.py`` checks against the installed classes.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import warnings
from pathlib import Path
from typing import Any

from honing.interop.configs.key_tables import FOLDER, KeyTable, table_json

OUT = Path(__file__).resolve().parents[3] / "honing" / "interop" / "configs" / FOLDER / "trl.json"
# TRL's config classes and the module each is imported from in TRL 1.16 (ORPO, CPO and GKD live in trl.experimental)
MODULES = {
    "DPOConfig": "trl",
    "KTOConfig": "trl",
    "ORPOConfig": "trl.experimental.orpo",
    "CPOConfig": "trl.experimental.cpo",
    "GRPOConfig": "trl",
    "RLOOConfig": "trl",
    "GKDConfig": "trl.experimental.gkd",
    "RewardConfig": "trl",
    "SFTConfig": "trl",
}


def installed_class(name: str) -> type:
    """``transformers.TrainingArguments`` or one of TRL's config classes, as installed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "TrainingArguments":
            return importlib.import_module("transformers").TrainingArguments
        return getattr(importlib.import_module(MODULES[name]), name)


def default_of(field: dataclasses.Field) -> Any:
    """A field's default (its factory's value); ``"REQUIRED"`` for none."""
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return "REQUIRED"


def installed_fields(name: str) -> dict[str, tuple[str, str]]:
    """Every init field of class ``name``: key -> (type, default as source text)."""
    return dataclass_fields(installed_class(name))


def dataclass_fields(cls: type) -> dict[str, tuple[str, str]]:
    """Every init field of the dataclass ``cls``: key -> (type, default as source text)."""
    found = {}
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        kind = re.sub(r"<class '([\w.]+)'>", r"\1", str(field.type)).replace("typing.", "")
        default = default_of(field)
        found[field.name] = (kind, getattr(default, "value", default).__repr__())  # an enum as its value
    return found


def groups() -> dict[str, dict[str, tuple[str, str]]]:
    """``TrainingArguments``' fields, then each TRL class's own and changed ones."""
    base = installed_fields("TrainingArguments")
    result = {"TrainingArguments": base}
    for name in MODULES:
        fields = installed_fields(name)
        result[name] = {key: value for key, value in fields.items() if base.get(key, ("", None))[1] != value[1]}
    return result


def main() -> None:
    """Write the table."""
    transformers, trl = (importlib.import_module(name).__version__ for name in ("transformers", "trl"))
    OUT.write_text(table_json(KeyTable(f"transformers {transformers}, trl {trl}", groups())))


if __name__ == "__main__":
    main()
