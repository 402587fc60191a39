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
    config = load_config(
        path,
        [
            "method=sft",
            "trainer.max_duration=200steps",
            "optim.lr=3e-4",
            "data.train.sources=[{path: x.json, format: alpaca}]",
            "optim.betas=[0.9, 0.99]",
        ],
    )
    assert isinstance(config, RunConfig)
    assert config.trainer.max_duration == "200steps"
    assert config.optim.lr == pytest.approx(3e-4)
    assert config.optim.betas == (0.9, 0.99)
    assert config.data.train.sources[0].path == "x.json"
    assert config.data.train.sources[0].format == "alpaca"


@pytest.mark.parametrize(
    "override, message",
    [
        ("trainer.max_durration=10steps", "trainer.max_durration: unknown key; did you mean trainer.max_duration?"),
        (
            "callbacks.checkpointer.save_intervl=5",
            "callbacks.checkpointer.save_intervl: unknown key; did you mean callbacks.checkpointer.save_interval?",
        ),
        (
            "data.train.sources=[{path: a, formt: x}]",
            "data.train.sources[0].formt: unknown key; did you mean data.train.sources[0].format?",
        ),
        ("trainer.seed=abc", "trainer.seed: Input should be a valid integer"),
        ("trainer.max_duration=10stpes", "trainer.max_duration: expected a duration like"),
        # a bare number names no unit (issue 45): the answer says which one to add
        ("trainer.max_duration=3", "trainer.max_duration: a duration needs its unit: did you mean '3steps'?"),
        ("trainer.hard_stop='250'", "trainer.hard_stop: a duration needs its unit: did you mean '250steps'?"),
        ("optim.lr=-1", "optim.lr: Input should be greater than 0 (got -1)"),
        ("tokenizer.kind=words", "tokenizer.kind: Input should be 'auto', 'byte', 'char', 'bpe' or 'pretrained'"),
        ("storage.work_dir=/scratch", "storage.work_dir: unknown key; did you mean storage.work_folder?"),
        ("trainer.nonfinite_loss=ignore", "trainer.nonfinite_loss: Input should be 'stop' or 'skip'"),
        ("scheduler.warmup_ratio=1.5", "scheduler.warmup_ratio: Input should be less than 1"),
    ],
)
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


def test_warm_start_and_loss_policy_keys():
    defaults = validate(copy.deepcopy(BASE))
    assert (
        defaults.trainer.load_trainer_state and defaults.trainer.load_optim_state is None
    )  # None: with the trainer state
    assert defaults.trainer.nonfinite_loss == "stop" and defaults.scheduler.warmup_ratio is None
    raw = copy.deepcopy(BASE)
    for override in [
        "trainer.load_path=runs/a/step600",
        "trainer.load_trainer_state=false",
        "trainer.load_optim_state=false",
        "trainer.nonfinite_loss=skip",
        "scheduler.warmup_ratio=0.03",
        "storage.work_folder=/scratch/work",
    ]:
        apply_override(raw, override)
    config = validate(raw)
    assert config.trainer.load_path == "runs/a/step600"
    assert config.trainer.load_trainer_state is False and config.trainer.load_optim_state is False
    assert config.trainer.nonfinite_loss == "skip" and config.scheduler.warmup_ratio == 0.03
    assert config.storage.work_folder == "/scratch/work"
