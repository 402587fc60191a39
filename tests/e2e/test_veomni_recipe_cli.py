"""A VeOmni ``BaseTrainer``-style subclass runs from the CLI: ``method: package.module:Class`` (or ``recipe:``)
builds that recipe, its overridden build steps take effect, and a VeOmni-style callback sees ``state.global_step``
and the step's keyword arguments."""

from __future__ import annotations

import json

import pytest

from honing.config import ConfigError, validate
from tests.distributed.runs import CONFIG, honing_train

RECIPE = "tests.recipes.veomni_style:FrozenEmbeddingsRecipe"


def test_a_recipe_subclass_runs_from_the_cli_with_its_build_steps_and_callback(tmp_path):
    save_folder = tmp_path / "run"
    text = CONFIG.format(save_folder=save_folder, steps=6, save_interval=100, custom="[]")
    path = tmp_path / "veomni.yaml"
    path.write_text(text.replace("method: pretrain", f"method: {RECIPE}"))
    result = honing_train(str(path), "callbacks.sample.enabled=false")
    assert result.returncode == 0, result.stderr[-3000:]

    recipe = json.loads((save_folder / "veomni_recipe.json").read_text())
    assert recipe["assets"] == ["TokenizersBackend"]  # build_model_assets returned the byte-level tokenizer
    assert recipe["groups"]["param_groups.0"] == 1e-4  # build_param_groups' own group, with its own LR
    callback = json.loads((save_folder / "veomni_callback.json").read_text())
    assert callback["steps"] == [2, 4, 6]  # state.global_step
    assert callback["masked"] == [True] * 6  # build_data_transform reached every batch
    assert len(callback["losses"]) == 6  # on_step_end's loss keyword
    assert json.loads((save_folder / "veomni_frozen.json").read_text()) == {"embeddings_unchanged": True}
    saved = (save_folder / "config.yaml").read_text()
    assert "method: pretrain" in saved and f"recipe: {RECIPE}" in saved


def test_the_recipe_key_and_its_refusals(tmp_path):
    raw = {"data": {"train": {"sources": [{"path": "x"}]}}, "model": {"config": {}}}
    assert validate({**raw, "recipe": RECIPE}).method == "pretrain"
    with pytest.raises(ConfigError, match=r"method: cannot import 'tests.recipes.nope:X'"):
        validate({**raw, "method": "tests.recipes.nope:X"})
    with pytest.raises(ConfigError, match=r"does not extend a method's recipe"):
        validate({**raw, "method": "honing.recipes.base:Recipe"})
    from honing.recipes import recipe_for

    with pytest.raises(ConfigError, match=r"recipe: 'tests.recipes.veomni_style:FrozenEmbeddingsRecipe' is not a "):
        recipe_for(validate({**raw, "method": "sft", "recipe": RECIPE}))


def test_a_veomni_collate_info_dict_is_read_as_veomni_defines_it(tmp_path):
    import yaml

    from honing.interop.veomni_collate import CollateInfoCollator, DataCollateInfo
    from honing.recipes.pretrain import PretrainRecipe

    class DictCollateInfo(PretrainRecipe):
        def build_data_collate_info(self):
            return {"input_features": (0, True, 0, 1)}  # VeOmni's document's example

    raw = yaml.safe_load(CONFIG.format(save_folder=tmp_path / "run", steps=2, save_interval=100, custom="[]"))
    recipe = DictCollateInfo(validate(raw))
    recipe.build()
    assert isinstance(
        recipe.collator, CollateInfoCollator
    )  # over the method's collator (tests/interop/test_veomni_collate.py)
    assert recipe.collator.infos == {"input_features": DataCollateInfo(0, True, 0, 1)}
