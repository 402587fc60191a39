"""``model.freeze_language``: the language model and its head stay as they are while the tower and projector train
(Qwen-VL's ``tune_mm_llm: false``), and with LoRA it is refused in one line."""

from __future__ import annotations

import pytest

from honing.errors import ConfigError
from honing.recipes.vl_sft import VLSFTRecipe
from tests.recipes.test_vl_sft import (  # noqa: F401  (fixtures)
    changed,
    parts,
    transcriptions,
    unwrapped,
    vl_config,
    weights_before_training,
)


def test_frozen_language_model_does_not_change_after_a_step(tmp_path, transcriptions, weights_before_training):  # noqa: F811
    model = {"lora": None, "freeze_vision": False, "freeze_language": True}
    recipe = VLSFTRecipe(vl_config(tmp_path, transcriptions, model=model, steps=1))
    recipe.run()
    vision, projector, language = (parts(recipe, part) for part in ("vision", "projector", "language"))
    assert vision and projector and language
    assert not changed(recipe, weights_before_training, language)  # embeddings, blocks and lm_head as they were
    assert changed(recipe, weights_before_training, projector) == set(projector)
    assert changed(recipe, weights_before_training, vision)
    parameters = dict(unwrapped(recipe.model).named_parameters())
    assert not any(parameters[name].requires_grad for name in language)


def test_frozen_language_model_with_lora_is_refused(tmp_path, transcriptions):  # noqa: F811
    recipe = VLSFTRecipe(vl_config(tmp_path, transcriptions, model={"freeze_language": True}, steps=1))
    with pytest.raises(ConfigError, match="model.freeze_language") as info:
        recipe.run()
    assert "\n" not in str(info.value)
