"""Overrides that remove keys (``~key.path``, as Hydra writes it) and an optimizer switched on the command line."""

from __future__ import annotations

import logging
import os

import pytest

from honing.config import ConfigError, load_config
from honing.interop.configs.loading import load_any_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUICKSTART = os.path.join(ROOT, "configs", "quickstart.yaml")


def test_a_removed_key_takes_its_default_and_counts_as_unset():
    config = load_config(QUICKSTART, ["~optim.lr", "~callbacks.sample"])
    default = type(config.optim).model_fields["lr"].default
    assert "lr" not in config.optim.model_fields_set and config.optim.lr == default != 3.0e-3
    assert "sample" not in config.callbacks.model_fields_set and config.callbacks.sample.prompts != ["def ", "import "]
    assert load_config(QUICKSTART).optim.lr == 3.0e-3  # what the file says


def test_a_list_item_is_removed_by_its_index(tmp_path):
    path = tmp_path / "two.yaml"
    path.write_text(
        "method: pretrain\ndata:\n  train:\n    sources: [{path: a.txt}, {path: b.txt}]\ntokenizer: {kind: byte}\n"
        "model: {config: {model_type: llama}}\n"
    )
    config = load_config(str(path), ["~data.train.sources[0]"])
    assert [source.path for source in config.data.train.sources] == ["b.txt"]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("~optim.nothing", r"optim.nothing is not in the config, so there is nothing to remove"),
        ("~model.lora", r"model.lora is not in the config"),
        ("~data.train.sources[3]", r"data.train.sources\[3\] is not in the config"),
        ("~", r"expected ~key.path"),
    ],
)
def test_removing_what_the_config_does_not_hold_is_one_line(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(QUICKSTART, [override])


def test_switching_the_optimizer_drops_the_files_keys_of_the_former_one(caplog):
    with caplog.at_level(logging.INFO, logger="honing.config.loading"):
        config = load_any_config(QUICKSTART, ["optim.name=sgd", "optim.momentum=0.9"])
    assert config.optim.name == "sgd" and config.optim.momentum == 0.9
    assert "betas" not in config.optim.model_fields_set and config.optim.weight_decay == 0.1  # sgd reads it
    assert any("optim.betas" in record.message and "not read by sgd" in record.message for record in caplog.records)


def test_a_key_of_another_optimizer_set_beside_the_switch_is_still_refused():
    with pytest.raises(ConfigError, match=r"optim.betas: not used by optim.name 'sgd'"):
        load_config(QUICKSTART, ["optim.name=sgd", "optim.betas=[0.9, 0.9]"])


def test_without_a_switch_on_the_command_line_a_foreign_key_in_the_file_is_refused(tmp_path):
    path = tmp_path / "sgd.yaml"
    path.write_text(open(QUICKSTART, encoding="utf-8").read().replace("  lr: 3.0e-3", "  name: sgd\n  lr: 3.0e-3"))
    with pytest.raises(ConfigError, match=r"optim.betas: not used by optim.name 'sgd'"):
        load_config(str(path))
