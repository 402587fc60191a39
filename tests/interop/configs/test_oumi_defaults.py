"""Where an Oumi file says nothing, the run gets what Oumi's run gets (Oumi's own defaults, passed to TRL and
transformers, and TRL's / transformers' for what Oumi does not pass), read here from the installed dataclasses; the
header ``honing convert`` writes lists every default filled in."""

import dataclasses
import json

import pytest
import transformers
import trl
import yaml

from honing.config import RunConfig, validate
from honing.interop.configs import convert_file, translate
from honing.interop.configs.translation import Translation


def field_default(cls, name):
    """A dataclass field's default value (without building the config)."""
    found = {item.name: item for item in dataclasses.fields(cls)}[name]
    return found.default_factory() if found.default is dataclasses.MISSING else found.default


def bare(trainer_type="TRL_SFT", **data):
    """An Oumi config that says only which model, which rows and which trainer (and for VERL_GRPO which reward:
    verl's built-in one per data_source is refused, honing has not ported it)."""
    raw = {
        "model": {"model_name": "some/model"},
        "data": {"train": {"datasets": [{"dataset_name": "yahma/alpaca-cleaned"}], **data}},
        "training": {"trainer_type": trainer_type},
    }
    if trainer_type == "VERL_GRPO":
        raw["training"]["reward_functions"] = ["countdown"]
    return raw


def test_a_bare_sft_config_gets_trls_and_transformers_defaults():
    translation = translate(bare())
    assert translation.refused == []
    config = validate(translation.config, source="bare")
    sft, hf = trl.SFTConfig, transformers.TrainingArguments
    assert config.data.packing is field_default(sft, "packing") is False  # honing's own default packs
    assert config.data.seq_len == field_default(sft, "max_length") == 1024  # honing's own: 256
    assert config.data.group_by_length is False and field_default(hf, "train_sampling_strategy") == "random"
    assert config.data.train_on == "all"  # Oumi's text_with_padding labels every token; TRL's assistant_only: False
    assert field_default(sft, "assistant_only_loss") is False
    assert config.optim.betas == (field_default(hf, "adam_beta1"), field_default(hf, "adam_beta2")) == (0.9, 0.999)
    assert config.optim.weight_decay == field_default(hf, "weight_decay") == 0.0
    assert config.optim.eps == field_default(hf, "adam_epsilon") and config.optim.grad_clip == field_default(
        hf, "max_grad_norm"
    )  # honing's own defaults agree, so nothing is written for them
    assert "eps" not in translation.config["optim"] and "grad_clip" not in translation.config["optim"]
    assert config.scheduler.name == str(getattr(field_default(hf, "lr_scheduler_type"), "value", "linear")) == "linear"
    assert config.scheduler.semantics == "transformers"  # its get_scheduler's LR at every step: warmup from 0, to 0
    # Oumi's TrainingParams, passed to TRL explicitly (TRL's own learning rate 2e-5 never applies)
    assert config.optim.name == "adamw_torch" and config.optim.lr == 5e-5
    assert config.trainer.max_duration == "3epochs" and config.trainer.seed == 42
    assert config.data.micro_batch_size == 8 and config.data.batch_size_per_rank == 8  # per device, as TRL reads it
    assert config.callbacks.console.log_interval == 50 and config.callbacks.checkpointer.save_interval == 500
    assert config.callbacks.tensorboard.enabled is True
    # afresh, as Oumi; an earlier run's checkpoints are never written over (honing's rule), unlike Oumi
    assert config.trainer.load_strategy == "never" and config.trainer.save_overwrite is False


@pytest.mark.parametrize(
    ("trainer_type", "expected"),
    [
        ("TRL_DPO", {"data.seq_len": 1024, "data.group_by_length": False}),
        ("TRL_GRPO", {"data.seq_len": 512 + 256, "grpo.temperature": 0.9}),
        ("VERL_GRPO", {"data.seq_len": 512 + 256, "grpo.temperature": 0.9}),
        ("OUMI", {"data.seq_len": 1024, "data.packing": False}),
    ],
)
def test_each_trainer_gets_its_own_defaults(trainer_type, expected):
    raw = bare(trainer_type)
    if trainer_type == "TRL_DPO":
        raw["data"]["train"]["datasets"] = [{"dataset_name": "mlabonne/orpo-dpo-mix-40k"}]
    translation = translate(raw)
    assert translation.refused == []
    for path, value in expected.items():
        assert translation.get(path) == value and path in translation.defaults, path
    validate(translation.config, source=trainer_type)
    assert field_default(trl.DPOConfig, "max_length") == 1024 and field_default(trl.DPOConfig, "beta") == 0.1


def test_what_the_file_sets_is_never_listed_as_a_default():
    raw = bare(collator_name="text_completions_only_with_padding")
    raw["model"]["model_max_length"] = 2048
    raw["training"].update(learning_rate=1e-4, logging_steps=7, per_device_train_batch_size=2, seed=3)
    translation = translate(raw)
    assert translation.refused == []
    for path in ("data.seq_len", "data.packing", "data.train_on", "optim.lr", "callbacks.console.log_interval",
                 "data.micro_batch_size", "data.batch_size_per_rank", "trainer.seed"):  # fmt: skip
        assert path not in translation.defaults, path
    assert translation.get("data.train_on") == "assistant" and translation.get("data.seq_len") == 2048
    assert translation.get("trainer.seed") == 3 and translation.get("data.micro_batch_size") == 2


def test_the_header_lists_every_default_filled_in_with_its_value_and_whose_it_is(tmp_path):
    path = tmp_path / "oumi.yaml"
    path.write_text(yaml.safe_dump(bare()))
    text = convert_file(str(path))
    header = [line for line in text.splitlines() if line.startswith("#   ")]
    translation = translate(bare())
    assert len(header) == len(translation.defaults) >= 15
    assert "#   data.packing: false  (TRL's SFTConfig.packing)" in header
    assert "#   data.seq_len: 1024  (TRL's SFTConfig.max_length)" in header
    assert "#   optim.lr: 5e-05  (Oumi's training.learning_rate)" in header
    # the listed values are the ones written below the header
    written = yaml.safe_load(text)
    for line in header:
        key, value = line[4:].split("  (")[0].split(": ", 1)
        node = written
        for part in key.split("."):
            node = node[part]
        assert node == json.loads(value), key


def test_a_default_is_filled_in_only_where_honings_own_differs():
    """Every filled default changes the run: honing's own default for that key (and method) is another value."""
    for trainer_type, extra in (("TRL_SFT", {}), ("TRL_DPO", {}), ("TRL_GRPO", {}), ("TRL_SFT", {"pack": True})):
        translation = translate(bare(trainer_type, **extra))
        method, train = translation.config["method"], translation.config["data"]["train"]
        sections = {method: {}} if method in ("dpo", "grpo") else {}  # their own section, at its defaults
        own = validate(
            {"method": method, "data": {"train": train}, "model": {"name_or_path": "m"}, **sections}, source="o"
        )
        for path in translation.defaults:
            node = own
            for part in path.split("."):
                node = getattr(node, part)
            assert node != translation.get(path), (trainer_type, path)


def test_a_vision_config_without_peft_trains_every_weight_as_oumi_does():
    raw = bare(collator_name="vision_language_with_padding")
    raw["data"]["train"]["datasets"] = [{"dataset_name": "merve/vqav2-small", "split": "validation"}]
    translation = translate(raw)
    assert translation.config["method"] == "vl_sft" and translation.refused == []
    # honing's vl_sft trains LoRA with the vision tower frozen by default; Oumi trains every module
    assert translation.get("model.lora", "unset") is None and translation.get("model.freeze_vision") is False
    assert {"model.lora", "model.freeze_vision"} <= set(translation.defaults)
    validate(translation.config, source="vl")


def test_translation_defaults_yield_to_a_later_explicit_setting():
    translation = Translation("Oumi")
    translation.default("data.packing", False, "TRL's SFTConfig.packing")
    translation.set("data.packing", True)
    translation.default("data.packing", False, "TRL's SFTConfig.packing")  # the file's value stays
    assert translation.get("data.packing") is True and translation.defaults == {}
    assert RunConfig.model_fields["data"] is not None
