"""``model.config_overrides`` (YaRN's rope_scaling, a longer max_position_embeddings) and ``model.load_kwargs`` (further
``from_pretrained`` arguments) on a saved tiny Llama folder."""

from __future__ import annotations

import pytest
import torch

from honing.config import ConfigError as ConfigValidationError
from honing.config.model_schema import ModelSection
from honing.errors import ConfigError
from honing.models.builder import ModelBuilder
from tests.helpers import tiny_llama

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny")
    model = tiny_llama(vocab=64, seed=0, rope_theta=5000.0)
    model.save_pretrained(folder)
    return folder, model.state_dict()


def load(folder, **model):
    builder = ModelBuilder(
        ModelSection(name_or_path=str(folder), **model), device=torch.device("cpu"), precision="fp32"
    )
    return builder.load_pretrained(shards=1)


def test_yarn_rope_scaling_reaches_the_models_config_and_its_rotary(saved):
    folder, weights = saved
    model = load(folder, config_overrides={"rope_scaling": YARN, "max_position_embeddings": 256})
    rope = model.config.rope_parameters
    assert rope["rope_type"] == "yarn" and rope["factor"] == 4.0 and rope["rope_theta"] == 5000.0  # theta kept
    assert model.config.max_position_embeddings == 256
    assert model.model.rotary_emb.rope_type == "yarn"
    plain = load(folder)
    assert plain.model.rotary_emb.rope_type == "default" and plain.config.max_position_embeddings == 64
    # the saved weights are loaded, and YaRN changes the positions' frequencies, so the outputs
    assert all(torch.equal(model.state_dict()[key], value) for key, value in weights.items())
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    assert not torch.allclose(model(ids).logits, plain(ids).logits)


def test_architecture_only_takes_the_overrides_too(saved):
    folder, _ = saved
    model = load(folder, pretrained_weights=False, config_overrides={"rope_scaling": YARN})
    assert model.config.rope_parameters["rope_type"] == "yarn"


def test_a_field_the_config_lacks_is_refused_by_name(saved):
    folder, _ = saved
    with pytest.raises(ConfigError, match=r"model.config_overrides.rope_scalling: not a field of the llama config"):
        load(folder, config_overrides={"rope_scalling": YARN})


def test_load_kwargs_reach_from_pretrained(saved):
    folder, _ = saved
    assert load(folder, load_kwargs={"use_safetensors": True}).config.model_type == "llama"
    with pytest.raises(ConfigError, match="model.load_kwargs: Unrecognized model"):  # transformers read subfolder
        load(folder, load_kwargs={"subfolder": "absent"})


def test_rope_theta_alone_keeps_the_rope_type(saved):
    folder, _ = saved
    rope = load(folder, config_overrides={"rope_theta": 100000.0}).config.rope_parameters
    assert rope["rope_theta"] == 100000.0 and rope["rope_type"] == "default"


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({"load_kwargs": {"trust_remote_code": True}},
         "model.load_kwargs.trust_remote_code: not passed through; set model.trust_remote_code"),
        ({"load_kwargs": {"torch_dtype": "bfloat16"}}, "model.load_kwargs.torch_dtype: not passed through; set "
                                                       "model.dtype"),
        ({"load_kwargs": {"revision": "main"}, "pretrained_weights": False}, "model.load_kwargs: read when weights"),
    ],
)  # fmt: skip
def test_keys_honing_sets_itself_are_refused_in_one_line(model, message):
    with pytest.raises(ValueError, match=message):
        ModelSection(name_or_path="some/model", **model)
    with pytest.raises(ConfigValidationError, match="model.config_overrides: read with model.name_or_path"):
        from honing.config import validate

        validate({"model": {"config": {"model_type": "llama"}, "config_overrides": {"rope_theta": 1.0}}})
