"""axolotl's and LLaMA-Factory's schemas walked key by key: every key their sources declare (the generated
``schema_keys/axolotl.json`` / ``llamafactory.json``) is in the translation table as honoured, moot or refused, and the
table names no other key; a key the schema gains fails here until the table gives it a verdict. Each honoured key is
read by the translator: set alone on a small config, it never reaches the "honoured but not read" check."""

from __future__ import annotations

import copy

import pytest

from honing.interop.configs import axolotl_table, llamafactory_table, translate
from honing.interop.configs.key_tables import key_table
from honing.interop.configs.llamafactory import TRAIN_KEYS
from honing.interop.configs.schema_table import counts, schema_default

AXOLOTL_KEYS = key_table("axolotl").keys
LLAMAFACTORY_KEYS = key_table("llamafactory").keys

AXOLOTL_BASE = {
    "base_model": "Qwen/Qwen2.5-0.5B",
    "datasets": [{"path": "data/alpaca.jsonl", "type": "alpaca"}],
    "learning_rate": 1e-5,
}
LLAMAFACTORY_BASE = {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "stage": "sft", "dataset": "x", "dataset_dir": "ONLINE"}


def walked() -> list[tuple[str, dict, dict]]:
    """(name, the schema's keys, the table) for every group of both schemas."""
    groups = [(f"axolotl {group!r}", AXOLOTL_KEYS[group], axolotl_table.TABLE[group]) for group in AXOLOTL_KEYS]
    groups.append(("LLaMA-Factory training arguments", TRAIN_KEYS, llamafactory_table.TABLE[""]))
    groups += [
        (f"LLaMA-Factory {group}", LLAMAFACTORY_KEYS[group], llamafactory_table.TABLE[group])
        for group in ("dataset_info", "dataset_info.columns", "dataset_info.tags")
    ]
    return groups


@pytest.mark.parametrize("name, schema, table", walked(), ids=[name for name, _, _ in walked()])
def test_every_key_of_the_schema_has_a_verdict(name, schema, table):
    assert sorted(set(schema) - set(table)) == [], f"{name}: keys of the schema without a verdict"
    assert sorted(set(table) - set(schema)) == [], f"{name}: verdicts for keys the schema does not have"
    assert all(verdict in ("honoured", "moot", "refused") and why for verdict, why in table.values())


def test_the_counts(capsys):
    lines = []
    for name, schema, table in walked():
        found = counts(table)
        lines.append(f"{name}: {len(schema)} keys, {found['honoured']} honoured, {found['moot']} moot, "
                     f"{found['refused']} refused")  # fmt: skip
        assert sum(found.values()) == len(schema)
    with capsys.disabled():
        print("\n" + "\n".join(lines))


def sample(kind: str, default: str):
    """A value of a key's type that asks for something (not its default)."""
    value = schema_default(default)
    if "bool" in kind:
        return not value if isinstance(value, bool) else True
    if "int" in kind:
        return 3
    if "float" in kind:
        return 0.25
    if "list" in kind:
        return ["q_proj"]
    if "dict" in kind:
        return {"enabled": True}
    return "cosine"


def honoured(schema: dict, table: dict) -> list[str]:
    """The honoured keys of a table."""
    return [key for key in schema if table[key][0] == "honoured"]


@pytest.mark.parametrize("key", honoured(AXOLOTL_KEYS[""], axolotl_table.TOP))
def test_each_honoured_axolotl_key_is_read(key):
    raw = copy.deepcopy(AXOLOTL_BASE)
    raw[key] = sample(*AXOLOTL_KEYS[""][key])
    translate(raw)  # a honoured key the translator leaves unread raises RuntimeError


@pytest.mark.parametrize("key", honoured(AXOLOTL_KEYS["datasets[]"], axolotl_table.DATASET))
def test_each_honoured_axolotl_dataset_key_is_read(key):
    raw = copy.deepcopy(AXOLOTL_BASE)
    raw["datasets"] = [
        {"path": "data/rows.jsonl", "type": "chat_template", key: sample(*AXOLOTL_KEYS["datasets[]"][key])}
    ]
    translate(raw)


@pytest.mark.parametrize("key", honoured(TRAIN_KEYS, llamafactory_table.TRAIN))
def test_each_honoured_llamafactory_key_is_read(key):
    raw = copy.deepcopy(LLAMAFACTORY_BASE)
    raw[key] = sample(*TRAIN_KEYS[key])
    translate(raw)


@pytest.mark.parametrize("code", ["nf4", "fp4"])
def test_llamafactorys_4bit_quantization_type_is_honings_code_of_that_name(code):
    raw = {**LLAMAFACTORY_BASE, "finetuning_type": "lora", "quantization_bit": 4, "quantization_type": code}
    translation = translate(raw)
    assert translation.refused == [] and translation.config["model"]["quantize"] == code
