"""A chained example whose input is missing: one line naming the example config that writes it and its command,
before any hub call (never huggingface_hub's "Repo id must be in the form")."""

from __future__ import annotations

import pytest

from honing import example_outputs
from honing.config import load_config
from honing.errors import ConfigError
from honing.example_outputs import EXAMPLE_CONFIGS
from honing.recipes import recipe_for
from honing.recipes.prerequisites import check_model_inputs

#: each chained example → (the key that names its input, the example config that writes that input)
CHAINED = {
    "sft-lora": ("model.name_or_path", "quickstart"),
    "sft-qlora": ("model.name_or_path", "quickstart"),
    "grpo": ("model.name_or_path", "sft-full"),
    "rloo": ("model.name_or_path", "sft-full"),
    "distill": ("distill.teacher_model_name_or_path", "sft-full"),
    "reward": ("model.name_or_path", "simpo"),
    "vl-grpo": ("model.name_or_path", "vl-sft"),
}


@pytest.mark.parametrize("name", sorted(CHAINED))
def test_a_missing_input_names_the_config_that_writes_it(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)  # no runs/ here: every example's input is missing
    key, producer = CHAINED[name]
    config = load_config(str(EXAMPLE_CONFIGS / f"{name}.yaml"), [])
    with pytest.raises(ConfigError) as raised:
        check_model_inputs(config)
    # outside this folder: the example's name, which the CLI finds from any folder
    assert str(raised.value) == (
        f"{key}: runs/{producer}/hf does not exist: it is the output of {producer}; run `honing train {producer}` first"
    )


def test_the_script_example_is_named_with_its_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load_config(str(EXAMPLE_CONFIGS / "grpo-tools.yaml"), [])
    with pytest.raises(ConfigError) as raised:
        check_model_inputs(config)
    assert str(raised.value) == (
        "model.name_or_path: runs/tool_grpo/sft/hf does not exist: it is written by examples/tool_grpo.py; "
        "run `python examples/tool_grpo.py` first"
    )


def test_the_run_refuses_before_any_hub_call(tmp_path, monkeypatch):
    import transformers

    def no_hub(*args, **kwargs):
        raise AssertionError("a hub call was made before the missing input was refused")

    monkeypatch.chdir(tmp_path)
    for loader in (transformers.AutoTokenizer, transformers.AutoConfig, transformers.AutoModelForCausalLM):
        monkeypatch.setattr(loader, "from_pretrained", no_hub)
    config = load_config(str(EXAMPLE_CONFIGS / "grpo.yaml"), [f"trainer.save_folder={tmp_path / 'grpo'}"])
    with pytest.raises(ConfigError, match=r"^model.name_or_path: runs/sft-full/hf does not exist: it is the output"):
        recipe_for(config).build()


def test_a_moved_example_output_says_what_to_pass(tmp_path, monkeypatch):
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "sft-full.yaml").write_text("method: sft\ntrainer: {save_folder: runs/elsewhere}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(example_outputs, "EXAMPLE_CONFIGS", configs)
    example_outputs.example_save_folders.cache_clear()
    try:
        message = example_outputs.missing_folder_message("model.name_or_path", "runs/sft-full/hf")
    finally:
        example_outputs.example_save_folders.cache_clear()
    assert message == (
        "model.name_or_path: runs/sft-full/hf does not exist: configs/sft-full.yaml now saves to runs/elsewhere; "
        "pass model.name_or_path=runs/elsewhere/hf (after `honing train configs/sft-full.yaml`)"
    )


@pytest.mark.parametrize("path", ["runs/hf", "runs/mine/hf", "./mine", "{tmp}/mine/hf"])
def test_a_path_that_no_example_writes_is_not_a_hub_name(tmp_path, monkeypatch, path):
    monkeypatch.chdir(tmp_path)  # no runs/ folder: "runs/hf" is still a path, not user runs's repo hf
    path = path.format(tmp=tmp_path)
    config = load_config(str(EXAMPLE_CONFIGS / "grpo.yaml"), [f"model.name_or_path={path}"])
    with pytest.raises(ConfigError) as raised:
        check_model_inputs(config)
    assert str(raised.value) == f"model.name_or_path: {path} does not exist and is not a hub name"


def test_a_reward_model_path_is_checked_too(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "sft-full" / "hf").mkdir(parents=True)  # the policy is there; the reward model is not
    overrides = ['grpo.rewards=[{"name": "reward_model:runs/reward/hf"}]']
    config = load_config(str(EXAMPLE_CONFIGS / "grpo.yaml"), overrides)
    with pytest.raises(ConfigError, match=r"^grpo.rewards\[0\].name: runs/reward/hf does not exist: it is the output"):
        check_model_inputs(config)
