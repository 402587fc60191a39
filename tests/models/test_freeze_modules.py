"""``model.freeze_layers`` entries as module names (every parameter under the module) and ``vision_encoder``
(a vision-language model's vision tower), beside name patterns."""

import pytest
import torch

from honing.errors import ConfigError
from honing.models import freeze_layers
from tests.helpers import tiny_llama


def frozen_names(model: torch.nn.Module) -> set[str]:
    return {name for name, param in model.named_parameters() if not param.requires_grad}


def test_a_module_name_freezes_every_parameter_under_it_and_no_neighbour():
    model = tiny_llama()
    freeze_layers(model, ["model.layers.1"])
    expected = {name for name, _ in model.named_parameters() if name.startswith("model.layers.1.")}
    assert frozen_names(model) == expected and len(expected) == 9


def test_vision_encoder_is_the_vision_tower_of_a_vision_language_model():
    from transformers import AutoModelForImageTextToText

    from honing.models.tiny_vl import tiny_vl_config

    model = AutoModelForImageTextToText.from_config(tiny_vl_config("qwen2_vl"))
    freeze_layers(model, ["vision_encoder"])
    tower = {
        name
        for name, _ in model.named_parameters()
        if name.startswith(("model.visual.patch_embed.", "model.visual.blocks."))
    }
    assert tower and frozen_names(model) == tower  # the merger (projector) still trains


def test_vision_encoder_on_a_text_model_is_a_one_line_error():
    with pytest.raises(ConfigError, match=r"^model\.freeze_layers\[0\]: 'vision_encoder' matches no parameter; "):
        freeze_layers(tiny_llama(), ["vision_encoder"])
