import copy

import pytest

from honing.config import ConfigError, apply_override, load_config, to_yaml, validate
from honing.config.schema import RunConfig

BASE = {"data": {"train": {"sources": [{"path": "corpus.txt"}]}}, "model": {"config": {"model_type": "llama"}}}


def write(tmp_path, text):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return str(path)


def test_yaml_and_overrides_resolve(tmp_path):
    path = write(tmp_path, "data:\n  train:\n    sources: [{path: a.txt}]\nmodel:\n  config: {model_type: llama}\n")
    config = load_config(path, ["trainer.max_duration=200steps", "optim.lr=3e-4",
                                "data.train.sources=[{path: x.json, format: alpaca}]", "optim.betas=[0.9, 0.99]"])
    assert isinstance(config, RunConfig)
    assert config.trainer.max_duration == "200steps"
    assert config.optim.lr == pytest.approx(3e-4)
    assert config.optim.betas == (0.9, 0.99)
    assert config.data.train.sources[0].path == "x.json"
    assert config.data.train.sources[0].format == "alpaca"


@pytest.mark.parametrize("override, message", [
    ("trainer.max_durration=10steps", "trainer.max_durration: unknown key; did you mean trainer.max_duration?"),
    ("callbacks.checkpointer.save_intervl=5",
     "callbacks.checkpointer.save_intervl: unknown key; did you mean callbacks.checkpointer.save_interval?"),
    ("data.train.sources=[{path: a, formt: x}]",
     "data.train.sources[0].formt: unknown key; did you mean data.train.sources[0].format?"),
    ("trainer.seed=abc", "trainer.seed: Input should be a valid integer"),
    ("trainer.max_duration=10stpes", "trainer.max_duration: expected a duration like"),
    ("optim.lr=-1", "optim.lr: Input should be greater than 0 (got -1)"),
    ("tokenizer.kind=words", "tokenizer.kind: Input should be 'auto', 'byte', 'char', 'bpe' or 'pretrained'"),
])
def test_bad_values_name_the_key(override, message):
    raw = copy.deepcopy(BASE)
    apply_override(raw, override)
    with pytest.raises(ConfigError) as info:
        validate(raw)
    assert message in str(info.value)


def test_missing_required_section():
    with pytest.raises(ConfigError, match="model: required key is missing"):
        validate({"data": copy.deepcopy(BASE["data"])})


def test_missing_file_names_path(tmp_path):
    with pytest.raises(ConfigError, match="nope.yaml: config file not found"):
        load_config(str(tmp_path / "nope.yaml"))


def test_invalid_yaml_names_path(tmp_path):
    path = write(tmp_path, "trainer: [unclosed\n")
    with pytest.raises(ConfigError, match="run.yaml: invalid YAML"):
        load_config(path)


def test_override_without_equals():
    with pytest.raises(ConfigError, match="expected key.path=value"):
        apply_override({}, "trainer.seed")


def test_micro_batch_must_divide_global():
    raw = copy.deepcopy(BASE)
    raw["data"].update(global_batch_size=16, micro_batch_size=3)
    with pytest.raises(ConfigError, match=r"micro_batch_size \(3\) must divide"):
        validate(raw)


def test_saved_yaml_redacts_secrets():
    raw = copy.deepcopy(BASE)
    raw["model"]["config"].update(api_key="sk-123", max_new_tokens=5)
    text = to_yaml(validate(raw))
    assert "sk-123" not in text
    assert "api_key: '***'" in text
    assert "max_new_tokens: 5" in text
