"""Oumi's ``model_kwargs`` and axolotl's ``model_config`` / ``rope_scaling`` / ``model_kwargs`` as honing's
``model.config_overrides`` and ``model.load_kwargs``; YaRN reaches the loaded model's config."""

import copy

import torch
import transformers

from honing.config import validate
from honing.interop.configs import translate
from honing.models.builder import ModelBuilder
from tests.helpers import tiny_llama

YARN = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64}


def oumi(folder, model_kwargs):
    return {
        "model": {"model_name": str(folder), "model_kwargs": model_kwargs},
        "data": {"train": {"datasets": [{"dataset_name": "yahma/alpaca-cleaned"}]}},
        "training": {"trainer_type": "TRL_SFT"},
    }


def test_oumi_model_kwargs_are_config_fields_and_hub_arguments(tmp_path):
    tiny_llama(vocab=64).save_pretrained(tmp_path)
    kwargs = {"rope_scaling": YARN, "max_position_embeddings": 128, "local_files_only": True, "disable_dropout": True}
    translation = translate(oumi(tmp_path, kwargs))
    assert translation.refused == []
    config = validate(translation.config, source="oumi")
    assert config.model.config_overrides == {"rope_scaling": YARN, "max_position_embeddings": 128}
    assert config.model.load_kwargs == {"local_files_only": True} and config.model.disable_dropout is True
    model = ModelBuilder(config.model, device=torch.device("cpu"), precision="fp32").load_pretrained(shards=1)
    assert model.config.rope_parameters["rope_type"] == "yarn" and model.config.max_position_embeddings == 128


def test_a_kwarg_honing_sets_itself_is_refused_naming_its_key(tmp_path):
    translation = translate(oumi(tmp_path, {"trust_remote_code": True, "rope_theta": 1e6}))
    assert translation.refused == [
        "model.model_kwargs.trust_remote_code: not passed through; set model.trust_remote_code (only for a folder you "
        "trust)"
    ]
    assert translation.get("model.config_overrides") == {"rope_theta": 1e6}


def test_axolotl_model_config_rope_scaling_and_model_kwargs():
    raw = {
        "base_model": "some/model",
        "datasets": [{"path": "rows.jsonl", "type": "alpaca"}],
        "model_config": {"max_position_embeddings": 8192},
        "rope_scaling": YARN,
        "model_kwargs": {"revision": "v1", "device_map": "auto"},
    }
    translation = translate(copy.deepcopy(raw))
    assert translation.get("model.config_overrides") == {"max_position_embeddings": 8192, "rope_scaling": YARN}
    assert translation.get("model.load_kwargs") == {"revision": "v1"}
    assert [line for line in translation.refused if line.startswith("model_kwargs")] == [
        "model_kwargs.device_map: not passed through; honing places the model on trainer.device and shards it by "
        "parallel.*"
    ]


def test_oumi_load_in_4bit_is_unused_as_in_oumi_and_said_in_one_line(tmp_path):
    tiny_llama(vocab=64).save_pretrained(tmp_path)
    # what Oumi does with model_kwargs (find_model_hf_config): transformers' AutoConfig leaves the switch unused
    _, unused = transformers.AutoConfig.from_pretrained(tmp_path, return_unused_kwargs=True, load_in_4bit=True)
    assert unused == {"load_in_4bit": True}
    translation = translate(oumi(tmp_path, {"load_in_4bit": True}))
    assert translation.refused == [] and translation.get("model.quantize") is None
    assert [note for note in translation.notes if "load_in_4bit" in note] == [
        "model.model_kwargs.load_in_4bit: unused, as in Oumi (its AutoConfig call leaves it out and the model loads "
        "unquantized); for QLoRA set peft.q_lora (honing's model.quantize: nf4)"
    ]
    assert validate(translation.config, source="oumi").model.quantize is None
