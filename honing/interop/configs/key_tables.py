"""The key tables of other systems' config schemas: every key, its type and default, as the system's source at one
commit or version declares them. They are generated data (``schema_keys/<system>.json``, package data written by the
generators under ``tests/interop/configs/``: ``schema_keys_from_sources.py``, ``oumi_verl_olmocr_keys_from_sources.py``,
``trl_keys_from_installed.py``, ``trl_script_keys_from_installed.py``); ``key_table`` reads one, ``table_json``
writes one."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import NamedTuple

FOLDER = "schema_keys"  # beside this module, shipped as package data (setup.py)
SYSTEMS = ("axolotl", "llamafactory", "olmocr", "oumi", "trl", "trl_script", "verl")


class KeyTable(NamedTuple):
    """One system's schema: where it was read (``source``) and its keys by group (group -> key -> (type, default))."""

    source: str
    keys: dict[str, dict[str, tuple[str, str]]]


@cache
def key_table(system: str) -> KeyTable:
    """The generated table of ``system`` (one of ``SYSTEMS``)."""
    if system not in SYSTEMS:
        raise KeyError(f"no key table {system!r}; expected one of: {', '.join(SYSTEMS)}")
    text = resources.files(__package__).joinpath(FOLDER, f"{system}.json").read_text(encoding="utf-8")
    data = json.loads(text)
    keys = {
        group: {key: (kind, default) for key, (kind, default) in rows.items()} for group, rows in data["keys"].items()
    }
    return KeyTable(data["source"], keys)


def table_json(table: KeyTable) -> str:
    """``table`` as its JSON file: one key a line, so that a regenerated table's diff names the keys that changed."""
    groups = []
    for group, rows in table.keys.items():
        lines = [f"      {json.dumps(key)}: {json.dumps(list(value))}" for key, value in rows.items()]
        groups.append(f"    {json.dumps(group)}: {{\n" + ",\n".join(lines) + "\n    }")
    head = f'{{\n  "source": {json.dumps(table.source)},\n  "keys": {{'
    return "\n".join([head, ",\n".join(groups), "  }", "}", ""])
