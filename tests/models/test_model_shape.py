"""A config's carried ``model.shape``: built into the family's config, compared with a saved folder's config.json
(a mismatch is one line naming the key and both values), and used for a hub name only where the hub is out of
reach."""

from __future__ import annotations

import huggingface_hub.constants
import pytest
from transformers import AutoConfig

from honing.errors import ConfigError
from honing.models.loading import load_pretrained_model
from honing.models.model_shape import config_from_shape, pretrained_config

LLAMA = {
    "model_type": "llama",
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 8.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 64,
        "rope_type": "llama3",
    },
}
UNKNOWN_HUB_NAME = "honing-tests/no-such-model"


@pytest.fixture
def offline(monkeypatch):
    """No hub: what ``HF_HUB_OFFLINE=1`` gives (huggingface_hub reads the variable once, at import)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


@pytest.fixture
def saved_folder(tmp_path):
    """A model folder with only its config.json (what ``save_pretrained`` writes)."""
    config_from_shape(LLAMA).save_pretrained(tmp_path)
    return str(tmp_path)


def test_a_shape_builds_its_family_config_and_leaves_the_mapping_alone():
    shape = {**LLAMA, "rope_scaling": dict(LLAMA["rope_scaling"])}
    config = config_from_shape(shape)
    assert (config.model_type, config.hidden_size, config.num_key_value_heads) == ("llama", 64, 2)
    assert config.rope_parameters["rope_theta"] == 500000.0 and config.rope_parameters["rope_type"] == "llama3"
    assert shape == LLAMA  # transformers fills nested mappings in place: the config's own stays as written


def test_a_matching_shape_is_checked_against_the_folder(saved_folder):
    assert pretrained_config(saved_folder, shape=LLAMA).hidden_size == 64
    # the hub's way of writing it (rope_theta beside rope_scaling) and transformers' (rope_parameters) agree
    assert AutoConfig.from_pretrained(saved_folder).to_dict()["rope_parameters"]["rope_theta"] == 500000.0


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"hidden_size": 96}, "model.shape.hidden_size: 96, but {folder}'s config.json has 64"),
        ({"num_hidden_layers": 3}, "model.shape.num_hidden_layers: 3, but {folder}'s config.json has 2"),
        # a key transformers moved is compared where it lives now
        ({"rope_theta": 10000.0}, "model.shape.rope_parameters.rope_theta: 10000.0, but {folder}'s config.json has"),
        ({"model_type": "qwen2"}, "model.shape.model_type: 'qwen2', but {folder}'s config.json has 'llama'"),
    ],
)
def test_a_mismatching_shape_is_refused_in_one_line(saved_folder, change, expected):
    with pytest.raises(ConfigError) as raised:
        pretrained_config(saved_folder, shape={**LLAMA, **change})
    message = str(raised.value)
    assert "\n" not in message and message.startswith(expected.format(folder=saved_folder))


def test_training_refuses_a_mismatching_shape_before_reading_any_weight(saved_folder):
    # the folder has no weights: transformers would fail on them; the shape is refused first
    with pytest.raises(ConfigError, match=r"^model\.shape\.intermediate_size: 256, but .* has 128"):
        load_pretrained_model(saved_folder, shape={**LLAMA, "intermediate_size": 256})


def test_an_unreachable_hub_name_plans_from_its_shape_and_says_so(offline, caplog):
    with caplog.at_level("INFO", logger="honing.models.model_shape"):
        config = pretrained_config(UNKNOWN_HUB_NAME, shape=LLAMA)
    assert config.num_hidden_layers == 2
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 1 and "using the shape this config carries" in lines[0] and UNKNOWN_HUB_NAME in lines[0]


def test_an_unreachable_hub_name_without_a_shape_names_the_fix(offline):
    with pytest.raises(ConfigError) as planning:
        pretrained_config(UNKNOWN_HUB_NAME)
    assert f"`hf download {UNKNOWN_HUB_NAME}`" in str(planning.value) and "model.shape" in str(planning.value)
    # training: the weights are needed, a shape would not help, so the message does not offer one
    with pytest.raises(ConfigError) as training:
        load_pretrained_model(UNKNOWN_HUB_NAME)
    message = str(training.value)
    assert "\n" not in message and message.startswith(f"model.name_or_path: {UNKNOWN_HUB_NAME!r} is a Hugging Face hub")
    assert f"`hf download {UNKNOWN_HUB_NAME}`" in message and "model.shape" not in message


def test_the_schema_takes_a_shape_only_beside_a_hub_name_or_folder():
    from honing.config import validate

    base = {"method": "sft", "data": {"train": {"sources": [{"path": "x.jsonl"}]}}}
    with pytest.raises(ConfigError, match="model.shape describes the model.name_or_path model"):
        validate({**base, "model": {"config": {"model_type": "llama"}, "shape": LLAMA}})
    with pytest.raises(ConfigError, match="model.shape.model_type: required"):
        validate({**base, "model": {"name_or_path": "org/model", "shape": {"hidden_size": 64}}})
    assert validate({**base, "model": {"name_or_path": "org/model", "shape": LLAMA}}).model.shape == LLAMA
