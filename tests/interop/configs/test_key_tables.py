"""The generated key tables (``honing/interop/configs/schema_keys/*.json``): each is exactly what its generator's
writer (``key_tables.table_json``) makes of it, so a hand edit or a writer change shows here; every group maps each
key to its type and default; and the tables read from the package are the files of the folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from honing.interop.configs.key_tables import FOLDER, SYSTEMS, key_table, table_json

TABLES = Path(__file__).resolve().parents[3] / "honing" / "interop" / "configs" / FOLDER


def test_every_table_file_is_a_system_the_loader_names():
    assert sorted(path.stem for path in TABLES.glob("*.json")) == sorted(SYSTEMS)


@pytest.mark.parametrize("system", SYSTEMS)
def test_a_table_is_what_its_writer_writes(system):
    table = key_table(system)
    assert table_json(table) == (TABLES / f"{system}.json").read_text(encoding="utf-8")
    assert table.source and table.keys
    for group, keys in table.keys.items():
        assert keys, group
        assert all(isinstance(value, tuple) and len(value) == 2 for value in keys.values()), group


def test_the_writer_keeps_group_and_key_order_and_types_and_defaults_as_text():
    text = table_json(key_table("trl_script")._replace(source="x", keys={"b": {"z": ("int", "1")}, "a": {}}))
    data = json.loads(text)
    assert data == {"source": "x", "keys": {"b": {"z": ["int", "1"]}, "a": {}}}
    assert list(data["keys"]) == ["b", "a"]


def test_an_unknown_system_is_refused_naming_the_known_ones():
    with pytest.raises(KeyError, match="trl_script"):
        key_table("axolotl_nested")
