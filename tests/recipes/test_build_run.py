"""``build_run``: each build step is given what the steps before it made, and the run's parts come out frozen."""

import dataclasses

import pytest

from honing.recipes.build_run import data_alone
from honing.recipes.sft import SFTRecipe
from honing.run.parts import RunParts
from tests.recipes.test_sft import sft_config


class RecordingSFT(SFTRecipe):
    """SFT whose steps write down the arguments they are given."""

    def __init__(self, config):
        super().__init__(config)
        self.seen = {}

    def model_assets(self):
        self.seen["assets"] = super().model_assets()
        return self.seen["assets"]

    def row_kind(self, assets):
        self.seen.setdefault("row_kind", assets)  # the data step's call (the generation eval reads it again)
        return super().row_kind(assets)

    def build_data(self, assets, model=None):
        self.seen["data_model"] = model
        return super().build_data(assets, model)

    def build_train_module(self, inputs):
        self.seen["inputs"] = inputs
        return super().build_train_module(inputs)

    def build_callbacks(self, parts):
        self.seen["parts"] = parts
        return super().build_callbacks(parts)


def test_each_step_is_given_what_the_steps_before_it_made(tmp_path):
    recipe = RecordingSFT(sft_config(tmp_path))
    assert not {"model", "tokenizer", "train_module", "trainer"} & set(vars(recipe))  # nothing waits as None
    trainer = recipe.build()
    seen = recipe.seen
    assert seen["row_kind"] is seen["assets"] and seen["inputs"].assets is seen["assets"]
    assert seen["data_model"] is seen["inputs"].model  # the model to train, built before the data
    parts = seen["parts"]
    assert isinstance(parts, RunParts) and parts.assets is seen["assets"] and parts.model is seen["inputs"].model
    assert parts.train_module is trainer.train_module and parts.data is seen["inputs"].data
    assert parts.config is recipe.saved_config and parts.tokenizer is seen["assets"].tokenizer
    assert parts.held_out_answers() == recipe.held_out_answers(seen["assets"])  # the validation conversations
    with pytest.raises(dataclasses.FrozenInstanceError):
        parts.model = None  # type: ignore[misc]


def test_the_data_alone_is_what_training_reads(tmp_path):
    recipe = RecordingSFT(sft_config(tmp_path))
    assets, data = data_alone(recipe)  # `honing data`: model assets, then the data, no model
    assert recipe.seen["row_kind"] is assets and recipe.seen["data_model"] is None
    assert data.reports["train"].rows > 0 and data.eval_batches is not None
