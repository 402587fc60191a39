"""``model.disable_dropout`` (TRL's ``disable_dropout``, Oumi's ``model_kwargs.disable_dropout``): every dropout of the
model at 0, LoRA's own kept."""

from __future__ import annotations

import importlib

import pytest
import torch

from honing.config import validate
from honing.config.methods import METHODS, dropout_disabled
from honing.interop.configs import translate
from honing.recipes import recipe_for
from honing.recipes.base import Recipe


def gpt2_run(tmp_path, **model):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog\n" * 40)
    config = {"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 2, "resid_pdrop": 0.1, "embd_pdrop": 0.1}
    raw = {
        "method": "pretrain",
        "trainer": {"save_folder": str(tmp_path / "run"), "max_duration": "1steps", "device": "cpu"},
        "data": {"train": {"sources": [{"path": str(corpus)}]}, "seq_len": 32, "global_batch_size": 2},
        "tokenizer": {"kind": "byte"},
        "model": {"config": config, "attn_implementation": "eager", **model},
        "callbacks": {"sample": {"enabled": False}, "evaluator": {"enabled": False}},
    }
    recipe = recipe_for(validate(raw))
    recipe.build()
    return recipe.model


def dropouts(model: torch.nn.Module) -> dict[str, float]:
    return {name: module.p for name, module in model.named_modules() if isinstance(module, torch.nn.Dropout)}


def test_every_dropout_is_zero_but_loras(tmp_path):
    assert max(dropouts(gpt2_run(tmp_path)).values()) == 0.1  # the config's, by default
    model = gpt2_run(tmp_path, disable_dropout=True, lora={"rank": 2, "dropout": 0.05, "target_modules": ["c_attn"]})
    found = dropouts(model)
    assert {p for name, p in found.items() if "lora_dropout" not in name} == {0.0}
    assert {p for name, p in found.items() if "lora_dropout" in name} == {0.05}


def test_oumis_model_kwargs_disable_dropout_translates():
    oumi = {
        "model": {"model_name": "gpt2", "model_kwargs": {"disable_dropout": True}},
        "data": {"train": {"datasets": [{"dataset_name": "text_sft_jsonl", "dataset_path": "train.jsonl"}]}},
        "training": {"trainer_type": "TRL_SFT"},
    }
    assert translate(oumi).config["model"]["disable_dropout"] is True


# each method's TRL config class: its disable_dropout default is honing's (SFT's config has none: dropout kept)
TRL_CONFIGS = {
    "dpo": "trl.DPOConfig",
    "vl_dpo": "trl.DPOConfig",
    "kto": "trl.KTOConfig",
    "orpo": "trl.experimental.orpo.ORPOConfig",
    "cpo": "trl.experimental.cpo.CPOConfig",
    "reward": "trl.RewardConfig",
    "distill": "trl.experimental.gkd.GKDConfig",
    "grpo": "trl.GRPOConfig",
    "vl_grpo": "trl.GRPOConfig",
    "rloo": "trl.RLOOConfig",
    "online_dpo": "trl.experimental.online_dpo.OnlineDPOConfig",
    # TRL 1.16 ships no PPOTrainer; its last one (trl/experimental/ppo, 0062ee10) called disable_dropout_in_model on
    # the policy, reference, value and reward models whatever the config said
    "ppo": None,
    "sft": "trl.SFTConfig",
    "vl_sft": "trl.SFTConfig",
    "pretrain": "trl.SFTConfig",
}


def test_the_default_is_the_methods_trl_default():
    pytest.importorskip("trl")
    assert set(TRL_CONFIGS) == set(METHODS)
    for method, path in TRL_CONFIGS.items():
        if path is None:
            expected = True
        else:
            module, name = path.rsplit(".", 1)
            fields = getattr(importlib.import_module(module), name).__dataclass_fields__
            expected = fields["disable_dropout"].default if "disable_dropout" in fields else False
        raw = {"method": method, "data": {"train": {"sources": [{"path": "rows.jsonl"}]}}}
        raw["model"] = {"config": {"model_type": "llama"}}
        assert dropout_disabled(validate(raw)) is expected, method
        raw["model"]["disable_dropout"] = not expected  # the key, where given, wins
        assert dropout_disabled(validate(raw)) is (not expected), method


def test_a_dpo_recipe_builds_its_model_without_dropout():
    raw = {"method": "dpo", "data": {"train": {"sources": [{"path": "pairs.jsonl"}]}}}
    raw["model"] = {"config": {"model_type": "gpt2"}}
    assert Recipe(validate(raw)).models.disable_dropout is True  # the builder's setting, the recipe's default
    raw["method"] = "sft"
    assert Recipe(validate(raw)).models.disable_dropout is False
