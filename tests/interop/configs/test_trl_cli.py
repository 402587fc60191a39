"""TRL's CLI config files (``trl sft --config FILE``) as honing's: TRL's own examples (its example YAML, its docs'
code blocks and its scripts' command lines, verbatim in ``foreign/trl/``) each translate and validate or are refused
in one line naming the key; the script's fields (ScriptArguments, ModelConfig, the mixture) all have a verdict;
``--from`` names the trainer, or keys only one trainer has do."""

from __future__ import annotations

import pytest
import yaml

from honing.cli import build_parser, run
from honing.config import ConfigError, validate
from honing.interop.configs.dialects import translate, translate_or_refuse
from honing.interop.configs.hf_engines import translate_deepspeed_file
from honing.interop.configs.key_tables import key_table
from honing.interop.configs.translation import Translation
from honing.interop.configs.trl_args import translate_trl_args
from honing.interop.configs.trl_cli_table import TABLES
from tests.interop.configs.trl_cli_examples import FOLDER, examples

KEYS = key_table("trl_script").keys
trl_script_keys_from_installed = pytest.importorskip("tests.interop.configs.trl_script_keys_from_installed")
EXAMPLES = examples()
EXAMPLE_CONFIG = str(FOLDER / "example_config.yaml")


def test_the_generated_script_keys_are_the_installed_classes_and_each_has_a_verdict():
    assert KEYS == trl_script_keys_from_installed.groups(), (
        "run tests/interop/configs/trl_script_keys_from_installed.py"
    )
    for group, keys in KEYS.items():
        assert set(TABLES[group]) == set(keys), group
        assert all(verdict in ("honoured", "moot", "refused") and why for verdict, why in TABLES[group].values())


def refused_key(values: dict) -> str | None:
    """The key honing refuses in one of TRL's examples, and why; None for one that translates."""
    if "accuracy_reward" in (values.get("reward_funcs") or []):
        return "reward_funcs"  # TRL's own reward reads a `solution` column; honing names its rewards by import path
    if values.get("optim") == "rmsprop":
        return "optim"  # honing has no RMSprop
    if "dataset_name" not in values and "datasets" not in values:
        return "dataset_name"  # gspo.py's command line: the script itself names its data set
    return None


def test_trls_examples_are_all_read():
    # clis.md's 24 YAML blocks (each with its `trl X --config` line after it) and 18 command lines, quickstart.md's
    # three commands, and the 17 command lines of the scripts' docstrings
    assert len(EXAMPLES) == 62
    assert {command for _, command, _ in EXAMPLES} == {
        "trl-sft", "trl-dpo", "trl-kto", "trl-reward", "trl-grpo", "trl-rloo", "trl-orpo", "trl-cpo", "trl-gkd"
    }  # fmt: skip


@pytest.mark.parametrize("where, command, values", EXAMPLES, ids=[f"{w}-{c}" for w, c, _ in EXAMPLES])
def test_each_trl_example_translates_and_validates_or_is_refused_in_one_line(where, command, values):
    key = refused_key(values)
    if key is not None:
        with pytest.raises(ConfigError) as error:
            validate(translate_or_refuse(values, where, command).config, source=where)
        message = str(error.value)
        assert "\n" not in message and f"cannot honour: {key}" in message.replace("; ", ": "), message
        return
    config = validate(translate_or_refuse(values, where, command).config, source=where)
    assert config.model.name_or_path == values["model_name_or_path"]
    if "datasets" in values:
        assert [source.path for source in config.data.train.sources] == [
            f"{d['path']}:train" for d in values["datasets"]
        ]
    else:
        assert [source.path for source in config.data.train.sources] == [f"{values['dataset_name']}:train"]


def example(where: str, **values) -> dict:
    """The first of TRL's examples from ``where`` that has ``values``."""
    return next(v for w, _, v in EXAMPLES if w.startswith(where) and values.items() <= v.items())


def test_the_dpo_scripts_lora_example_keeps_its_numbers():
    values = example("trl/scripts/dpo.py", use_peft=True)
    config = validate(translate(values, "dpo", "trl-dpo").config)
    assert config.method == "dpo"
    assert (config.model.lora.rank, config.model.lora.alpha) == (32, 16.0)
    assert config.model.lora.dropout == 0.05  # TRL's ModelConfig default
    assert config.trainer.max_duration == "1000steps"  # max_steps wins over num_train_epochs, as in transformers
    assert config.optim.lr == 5.0e-6
    assert (config.data.micro_batch_size, config.data.batch_size_per_rank) == (2, 16)
    assert config.callbacks.evaluator.interval == 50
    # eval_strategy steps: TRL's script evaluates the data set's test split
    assert [source.path for source in config.data.validation.sources] == ["trl-lib/ultrafeedback_binarized:test"]


def test_the_kto_qlora_example_and_the_reward_lora_example():
    kto = validate(translate(example("examples/scripts/kto.py", load_in_4bit=True), "kto", "trl-kto").config)
    assert kto.model.quantize == "nf4" and kto.model.lora.target_modules == "all-linear"
    fp4 = {**example("examples/scripts/kto.py", load_in_4bit=True), "bnb_4bit_quant_type": "fp4"}
    assert translate(fp4, "kto", "trl-kto").config["model"]["quantize"] == "fp4"  # bitsandbytes' other 4-bit code
    assert kto.scheduler.warmup_ratio == 0.1  # warmup_steps 0.1: a ratio in transformers 5
    reward = validate(
        translate(example("examples/scripts/reward_modeling.py", use_peft=True), "r", "trl-reward").config
    )
    assert reward.method == "reward" and reward.model.lora.task_type == "SEQ_CLS" and reward.data.seq_len == 2048


def test_the_example_yaml_needs_from_and_translates_with_it():
    raw = yaml.safe_load(open(EXAMPLE_CONFIG))
    with pytest.raises(ConfigError, match="--from") as error:
        translate(raw, EXAMPLE_CONFIG)
    assert "\n" not in str(error.value) and "trl-sft, trl-dpo" in str(error.value)
    config = validate(translate(raw, EXAMPLE_CONFIG, "trl-sft").config)
    assert (config.method, config.optim.lr, config.scheduler.name) == ("sft", 0.0001, "cosine")
    assert config.model.name_or_path == "Qwen/Qwen2.5-0.5B"
    assert config.data.train.sources[0].path == "stanfordnlp/imdb:train"


def test_keys_only_one_trainer_has_name_it():
    base = {"model_name_or_path": "m", "dataset_name": "d"}
    assert translate({**base, "beta": 0.2, "label_smoothing": 0.1}, "f").config["method"] == "dpo"
    assert translate({**base, "packing": True}, "f").config["method"] == "sft"
    with pytest.raises(ConfigError, match="its keys fit trl-dpo, trl-kto"):
        translate({**base, "beta": 0.2, "loss_type": ["sigmoid"]}, "f")
    with pytest.raises(ConfigError, match="fit no trainer"):
        translate({**base, "packing": True, "label_smoothing": 0.1}, "f")


def test_rewards_lora_launcher_and_mixture_keys():
    values = {
        "model_name_or_path": "m",
        "datasets": [{"path": "a", "name": "sub", "split": "dev"}, {"path": "b"}],
        "reward_model_name_or_path": "runs/reward/hf",
        "reward_funcs": ["my_rewards.length.short"],
        "reward_weights": [1.0, 0.5],
        "accelerate_config": "multi_gpu",
        "num_processes": 4,
        "use_peft": False,
        "lora_r": 64,
    }
    t = translate(values, "f", "trl-grpo")
    assert t.config["grpo"]["rewards"] == [
        {"name": "reward_model:runs/reward/hf", "weight": 1.0},
        {"name": "my_rewards.length:short", "weight": 0.5},
    ]
    assert t.config["data"]["train"]["sources"] == [{"path": "a:dev", "subset": "sub"}, {"path": "b:train"}]
    assert t.config["parallel"]["strategy"] == "ddp"
    assert any(note.startswith("num_processes: 4: start the processes with") for note in t.notes)
    assert any(note.startswith("use_peft: not set, so lora_r unused") for note in t.notes)
    refused = translate({"model_name_or_path": "m", "dataset_name": "d", "use_peft": True, "use_dora": True,
                         "env": {"A": "1"}, "accelerate_config": "my.yaml"}, "f", "trl-sft").refused  # fmt: skip
    assert sorted(line.split(":")[0] for line in refused) == ["accelerate_config", "env", "use_dora"]


def test_honing_convert_and_config_show_take_from(capsys):
    assert run(build_parser().parse_args(["convert", EXAMPLE_CONFIG, "--from", "trl-sft"])) == 0
    assert "read as" not in capsys.readouterr().out  # the YAML itself
    assert run(build_parser().parse_args(["config", "show", EXAMPLE_CONFIG, "--from", "trl-sft"])) == 0
    assert yaml.safe_load(capsys.readouterr().out)["model"]["name_or_path"] == "Qwen/Qwen2.5-0.5B"
    with pytest.raises(ConfigError, match="--from trl-ppo: expected one of oumi, "):
        run(build_parser().parse_args(["convert", EXAMPLE_CONFIG, "--from", "trl-ppo"]))


def test_a_deepspeed_mapping_translates_the_same_twice():
    settings = {"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}
    first, second = Translation("x"), Translation("x")
    translate_deepspeed_file(first, "deepspeed", settings, None)
    translate_deepspeed_file(second, "deepspeed", settings, None)
    assert first.config == second.config and first.config["parallel"]["strategy"] == "fsdp"
    assert settings == {"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}


def test_a_fractional_logging_steps_is_a_ratio_of_max_steps():
    # transformers' TrainerState.compute_steps: ceil(0.1 x 25) = 3
    t = translate_trl_args({"logging_steps": 0.1, "max_steps": 25, "eval_strategy": "steps"}, "SFTConfig")
    assert t.config["callbacks"]["console"]["log_interval"] == 3
    assert t.config["callbacks"]["evaluator"]["interval"] == 3  # eval_steps unset: logging_steps, as transformers
    assert (
        translate_trl_args({"save_steps": 0.5, "max_steps": 9}, "SFTConfig").config["callbacks"]["checkpointer"][
            "save_interval"
        ]
        == 5
    )
    refused = translate_trl_args({"logging_steps": 0.1, "num_train_epochs": 2}, "SFTConfig").refused
    assert len(refused) == 1 and refused[0].startswith("logging_steps: 0.1: a ratio of the run's steps")
