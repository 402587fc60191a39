"""Overrides reach into lists (``data.train.sources[0].path=x``, as Hydra / OmegaConf users type them), and every
error path keeps its list indexes."""

import pytest

from honing.config import ConfigError, apply_override, load_config
from honing.config.loading import parse_key_path


def test_an_indexed_override_sets_that_item_only():
    raw = {"data": {"train": {"sources": [{"path": "a.txt"}, {"path": "b.txt", "weight": 2}]}}}
    apply_override(raw, "data.train.sources[1].path=c.txt")
    apply_override(raw, "data.train.sources.0.weight=0.5")  # OmegaConf's dotted index
    assert raw["data"]["train"]["sources"] == [{"path": "a.txt", "weight": 0.5}, {"path": "c.txt", "weight": 2}]


def test_key_paths_parse_with_indexes():
    assert parse_key_path("data.train.sources[0].path") == ["data", "train", "sources", 0, "path"]
    assert parse_key_path("a[1][2]") == ["a", 1, 2]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("data.train.sources[5].path=x", r"data\.train\.sources\[5\] does not exist; data\.train\.sources has 2 item"),
        ("data.train[0].path=x", r"data\.train is \{.*\}, not a list"),
        (
            "data.validation.sources[0].path=x",
            r"data\.validation\.sources is not set in the config, so it has no item to change; set the whole list",
        ),
        ("data.train.sources[0]..path=x", r"cannot read the key path"),
        ("data.train.sources.x.path=x", r"data\.train\.sources is a list; index it as \[N\]"),
    ],
)
def test_a_bad_indexed_override_is_one_line_naming_the_path(override, message):
    raw = {"data": {"train": {"sources": [{"path": "a.txt"}, {"path": "b.txt"}]}}}
    with pytest.raises(ConfigError, match=message) as error:
        apply_override(raw, override)
    assert "\n" not in str(error.value)


def test_validation_errors_keep_list_indexes(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("data: {train: {sources: [{path: a.txt}, {path: b.txt}, {path: c.txt}]}}\nmodel: {config: {}}\n")
    with pytest.raises(ConfigError, match=r"data\.train\.sources\[2\]\.format: Input should be") as error:
        load_config(str(path), ["data.train.sources[2].format=parquet"])
    with pytest.raises(
        ConfigError,
        match=r"data\.train\.sources\[1\]\.pathh: unknown key; did you mean "
        r"data\.train\.sources\[1\]\.path\?",
    ):
        load_config(str(path), ["data.train.sources[1].pathh=x"])
    assert "\n" not in str(error.value)
    config = load_config(str(path), ["data.train.sources[0].path=x.txt"])
    assert [source.path for source in config.data.train.sources] == ["x.txt", "b.txt", "c.txt"]
