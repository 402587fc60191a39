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
    message = r"^model\.freeze_layers\[0\]: 'vision_encoder' matches no module or parameter of this model; "
    with pytest.raises(ConfigError, match=message):
        freeze_layers(tiny_llama(), ["vision_encoder"])


def test_a_transformers_4_name_freezes_the_module_transformers_5_keeps_it_at(caplog):
    from transformers import AutoModelForImageTextToText

    from honing.models.tiny_vl import tiny_vl_config

    # Oumi's Qwen2-VL recipes write freeze_layers: [visual]; transformers 5 keeps the tower at model.visual
    model = AutoModelForImageTextToText.from_config(tiny_vl_config("qwen2_vl"))
    with caplog.at_level("INFO", logger="honing.models.freeze"):
        freeze_layers(model, ["visual"])
    tower = {name for name, _ in model.named_parameters() if name.startswith("model.visual.")}
    assert tower and frozen_names(model) == tower  # the language model and lm_head still train
    assert any(name.startswith("model.language_model.") for name, p in model.named_parameters() if p.requires_grad)
    assert "freezing 'model.visual'" in caplog.text


def test_a_name_without_the_base_models_prefix_is_looked_up_under_it():
    from transformers import AutoModelForImageTextToText

    from honing.models.tiny_vl import tiny_vl_config

    # Oumi's SmolVLM recipes write vision_model; Idefics3 keeps it at model.vision_model (no renaming: the prefix)
    model = AutoModelForImageTextToText.from_config(tiny_vl_config("idefics3"))
    freeze_layers(model, ["vision_model"])
    assert frozen_names(model) == {n for n, _ in model.named_parameters() if n.startswith("model.vision_model.")}


def test_a_name_matching_no_module_is_one_line_naming_the_models_modules():
    model = tiny_llama()
    message = (
        r"^model\.freeze_layers\[1\]: 'decoder\.0' matches no module or parameter of this model; its modules are "
        r"model\.embed_tokens, model\.layers, model\.norm, model\.rotary_emb, lm_head \(an entry is"
    )
    with pytest.raises(ConfigError, match=message) as raised:
        freeze_layers(model, ["model.norm", "decoder.0"])
    assert "\n" not in str(raised.value)
    assert not frozen_names(model)  # nothing frozen on error


def test_with_freeze_missing_skip_a_name_matching_nothing_is_one_warning_and_the_others_freeze(caplog):
    model = tiny_llama()
    with caplog.at_level("WARNING", logger="honing.models.freeze"):
        freeze_layers(model, ["model.norm", "model.vision_embed_tokens"], missing="skip")
    assert frozen_names(model) == {"model.norm.weight"}
    (warning,) = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert warning.startswith("model.freeze_layers[1]: 'model.vision_embed_tokens' matches no module")
    assert warning.endswith("; skipped (model.freeze_missing: skip)")
