"""Configs written for an earlier TRL (0.x; Oumi pins trl>=0.24): the fields the installed TRL dropped are read as
that release read them (DPO's max_prompt_length / max_completion_length as honing's data caps, rpo_alpha, SFT's
max_seq_length, GRPO's max_prompt_length), noted where they change no step, refused by name where honing has not
the feature; a key no release had is still a misspelling."""

import pytest

from honing.config import validate
from honing.interop.configs.trl_args import translate_trl_args
from honing.interop.configs.trl_former_fields import FORMER_FIELDS, TRAINING_ARGUMENTS
from honing.interop.configs.trl_method_keys import class_fields
from tests.interop.configs.test_oumi_options import translated

# a DPO config as TRL 0.x's examples and the alignment handbook's recipes write it
HANDBOOK_DPO = {
    "beta": 0.01,
    "max_length": 1024,
    "max_prompt_length": 512,
    "rpo_alpha": 0.5,
    "label_pad_token_id": -100,
    "generate_during_eval": False,
    "learning_rate": 5.0e-7,
}


@pytest.mark.parametrize(
    "config_class,fields", sorted({**FORMER_FIELDS, "TrainingArguments": TRAINING_ARGUMENTS}.items())
)
def test_each_former_field_is_gone_from_the_installed_class(config_class, fields):
    # a field the installed class has is read by its own row, never by this table
    assert not set(fields) & set(class_fields(config_class))


def test_a_trl_0x_dpo_config_translates_with_its_caps_and_rpo_alpha():
    t = translate_trl_args(HANDBOOK_DPO, "DPOConfig")
    assert t.refused == []
    # the class's keys alone; the script's (model, data set) complete the config
    config = {**t.config, "model": {"name_or_path": "Qwen/Qwen2.5-0.5B-Instruct"}}
    config["data"] = {**config["data"], "train": {"sources": [{"path": "pairs.jsonl"}]}}
    validate(config, source="trl")
    assert t.get("data.max_prompt_length") == 512 and t.get("data.seq_len") == 1024
    assert t.get("dpo.rpo_alpha") == 0.5
    assert any(note.startswith("label_pad_token_id: an earlier TRL's field (0.x): not needed") for note in t.notes)
    t = translate_trl_args({**HANDBOOK_DPO, "max_completion_length": 256}, "DPOConfig")
    assert t.get("data.max_completion_length") == 256


@pytest.mark.parametrize(
    "values,line",
    [
        ({"reference_free": True}, "reference_free: an earlier TRL's field (0.x): True is not available: DPO against"),
        ({"generate_during_eval": True}, "generate_during_eval: an earlier TRL's field (0.x): True is not available"),
        ({"max_prompt_length": 0}, "max_prompt_length: 0: expected a positive number of tokens"),
        ({"max_promt_length": 512}, "max_promt_length: not a field of DPOConfig"),
    ],
)
def test_what_honing_has_not_is_refused_by_name_and_a_misspelling_stays_one(values, line):
    refused = translate_trl_args({**HANDBOOK_DPO, **values}, "DPOConfig").refused
    assert len(refused) == 1 and refused[0].startswith(line)


def test_sft_max_seq_length_and_grpo_max_prompt_length():
    t = translate_trl_args({"max_seq_length": 2048, "dataset_batch_size": 1000}, "SFTConfig")
    assert t.refused == [] and t.get("data.seq_len") == 2048
    t = translate_trl_args({"max_prompt_length": 256, "max_completion_length": 128}, "GRPOConfig")
    assert t.refused == [] and t.get("data.seq_len") == 256 + 128


def test_kto_and_orpo_prompt_lengths_are_notes_saying_how_honing_cuts():
    for config_class in ("KTOConfig", "ORPOConfig", "CPOConfig"):
        t = translate_trl_args({"max_prompt_length": 128, "truncation_mode": "keep_end"}, config_class)
        assert t.refused == [], config_class
        assert t.get("data.max_prompt_length") is None
        assert any("only as far as data.seq_len" in note for note in t.notes)
    refused = translate_trl_args({"truncation_mode": "keep_start"}, "KTOConfig").refused
    assert refused == ["truncation_mode: an earlier TRL's field (0.x): 'keep_start' is not available: honing keeps a "
                       "prompt's end"]  # fmt: skip


def test_oumis_trainer_kwargs_for_its_pinned_trl_dpo():
    translation = translated(
        **{"training.trainer_type": "TRL_DPO", "training.trainer_kwargs": {"max_prompt_length": 256, "rpo_alpha": 1.0}}
    )
    assert translation.config["data"]["max_prompt_length"] == 256
    assert translation.config["dpo"]["rpo_alpha"] == 1.0


def test_transformers_4_training_arguments_a_trl_file_still_carries():
    # warmup_ratio, overwrite_output_dir, logging_dir, group_by_length: most TRL configs before transformers 5 have them
    t = translate_trl_args(
        {"warmup_ratio": 0.1, "overwrite_output_dir": True, "logging_dir": "logs", "group_by_length": True},
        "SFTConfig",
    )
    assert t.refused == []
    assert t.get("scheduler.warmup_ratio") == 0.1 and t.get("data.group_by_length") is True
    assert any(
        note.startswith("overwrite_output_dir: transformers 4's field (dropped in 5): honing starts")
        for note in t.notes
    )
    # transformers' rule: warmup steps win over a ratio
    t = translate_trl_args({"warmup_ratio": 0.1, "warmup_steps": 5}, "DPOConfig")
    assert t.get("scheduler.warmup_steps") == 5 and t.get("scheduler.warmup_ratio") is None
    # a dump of transformers 4's TrainingArguments writes the renamed fields as null: nothing asked
    assert translate_trl_args({"per_gpu_train_batch_size": None, "torchdynamo": None}, "SFTConfig").refused == []
    assert translate_trl_args({"per_gpu_train_batch_size": 4}, "SFTConfig").refused == [
        "per_gpu_train_batch_size: transformers 4's field (dropped in 5): give it as per_device_train_batch_size, the "
        "name transformers 5 reads"
    ]
