"""``model.pretrained_weights: false``: the named model's architecture with random weights (Oumi's
``load_pretrained_weights: false``), through a whole pretraining run."""

from __future__ import annotations

import pytest
import torch

from honing.config import ConfigError, validate
from honing.recipes import recipe_for
from tests.helpers import tiny_llama


def run_config(tmp_path, folder, **model):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog\n" * 40)
    return validate(
        {
            "method": "pretrain",
            "trainer": {"save_folder": str(tmp_path / "run"), "max_duration": "2steps", "device": "cpu"},
            "data": {"train": {"sources": [{"path": str(corpus)}]}, "seq_len": 32, "global_batch_size": 2},
            "tokenizer": {"kind": "byte"},
            "model": {"name_or_path": str(folder), **model},
            "callbacks": {"sample": {"enabled": False}, "evaluator": {"enabled": False}},
        }
    )


def test_the_named_architecture_is_built_with_random_weights(tmp_path):
    saved = tiny_llama(vocab=258, seed=0, hidden_size=48)
    saved.save_pretrained(tmp_path / "saved")
    recipe = recipe_for(run_config(tmp_path, tmp_path / "saved", pretrained_weights=False))
    recipe.build()
    built = recipe.model
    assert built.config.hidden_size == 48 and built.config.num_hidden_layers == 2  # the saved model's shape
    loaded, original = built.state_dict(), saved.state_dict()
    assert loaded.keys() == original.keys()
    assert not any(torch.equal(loaded[key], original[key]) for key in original if key.endswith("proj.weight"))
    recipe.trainer.fit()  # and it trains
    pretrained = recipe_for(run_config(tmp_path, tmp_path / "saved"))
    pretrained.build()
    assert torch.equal(
        pretrained.model.state_dict()["model.layers.0.mlp.up_proj.weight"],
        original["model.layers.0.mlp.up_proj.weight"],
    )


def test_it_needs_a_named_model(tmp_path):
    with pytest.raises(ConfigError, match="model.pretrained_weights: false names model.name_or_path"):
        validate({"method": "pretrain", "model": {"config": {"model_type": "llama"}, "pretrained_weights": False}})
