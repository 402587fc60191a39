"""A config written by hand for ``oumi train`` with keys Oumi's schema lacks (``model.name``, ``training.method``,
a data set's ``name``): refused in one line that says Oumi lacks each key and names Oumi's key for it when there is
one, instead of "honing has no key for it"; a translated config keeps its older Oumi keys (noted) untouched."""

from __future__ import annotations

import pytest

from honing.config import ConfigError
from honing.interop.configs import translate
from honing.interop.configs.dialects import translate_or_refuse
from honing.interop.configs.oumi_shape import keys_oumi_lacks

HAND_WRITTEN = {
    "model": {"name": "meta-llama/Meta-Llama-3-8B-Instruct", "lora_r": 16, "trust_remote_code": True},
    "data": {"train": {"datasets": [{"name": "org/pairs", "split": "train"}]}},
    "training": {"method": "dpo", "batch_size": 2, "learning_rate": 5e-7, "num_epochs": 3, "beta": 0.1},
    "output_dir": "./models/judge",
    "lr_scheduler_type": "cosine",
}


def test_keys_oumi_lacks_are_found_in_every_section_and_data_set():
    assert [key for key, _ in keys_oumi_lacks(HAND_WRITTEN)] == [
        "model.name", "model.lora_r", "data.train.datasets[0].name", "training.method", "training.batch_size",
        "training.num_epochs", "training.beta", "output_dir", "lr_scheduler_type",
    ]  # fmt: skip


def test_a_hand_written_oumi_config_is_refused_naming_oumis_keys():
    refused = dict(line.split(": ", 1) for line in translate(HAND_WRITTEN).refused)
    expected = {  # renamed, in another section, in a data set, or unknown to Oumi altogether
        "model.name": "model.model_name", "model.lora_r": "peft.lora_r", "training.method": "training.trainer_type",
        "training.batch_size": "training.per_device_train_batch_size", "output_dir": "training.output_dir",
        "lr_scheduler_type": "training.lr_scheduler_type",
        "data.train.datasets[0].name": "data.train.datasets[0].dataset_name",
    }  # fmt: skip
    for key, oumis in expected.items():
        assert refused[key] == f"not a key of Oumi's TrainingConfig (Oumi's key is {oumis})"
    assert refused["training.beta"] == "not a key of Oumi's TrainingConfig (check its spelling)"
    assert not any("honing has no key" in why for why in refused.values())
    with pytest.raises(ConfigError) as error:
        translate_or_refuse(HAND_WRITTEN, "oumi/train_config.yaml")
    assert len(str(error.value).splitlines()) == 1


def test_an_older_oumi_key_that_is_noted_is_left_alone():
    raw = {
        "model": {"model_name": "Qwen/Qwen2.5-0.5B-Instruct"},
        "data": {"train": {"datasets": [{"dataset_name": "yahma/alpaca-cleaned"}], "use_async_dataset": True}},
        "training": {"trainer_type": "TRL_SFT"},
    }
    assert [key for key, _ in keys_oumi_lacks(raw)] == ["data.train.use_async_dataset"]
    translation = translate(raw)
    assert translation.refused == []
    assert any(note.startswith("data.train.use_async_dataset:") for note in translation.notes)
