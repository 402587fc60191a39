import json

import pytest

from honing.config import ConfigError, validate
from honing.recipes import PretrainRecipe
from honing.train import Checkpointer
from tests.helpers import TINY_LLAMA_CONFIG


def tiny_config(tmp_path, **sections):
    text = tmp_path / "corpus.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 200)
    held_out = tmp_path / "held_out.txt"
    held_out.write_text("a lazy dog sleeps while the quick fox runs. " * 40)
    raw = {
        "trainer": {"save_folder": str(tmp_path / "run"), "max_duration": "6steps", "num_threads": 1},
        "data": {
            "train": {"sources": [{"path": str(text)}]},
            "validation": {"sources": [{"path": str(held_out)}]},
            "seq_len": 32,
            "global_batch_size": 4,
            "micro_batch_size": 2,
            "cache_dir": str(tmp_path / "cache"),
        },
        "tokenizer": {"kind": "char"},
        "model": {"config": dict(TINY_LLAMA_CONFIG)},
        "callbacks": {
            "checkpointer": {"save_interval": 3},
            "evaluator": {"interval": 3},
            "sample": {"enabled": False},
            "console": {"enabled": False},
        },
    }
    for section, values in sections.items():
        raw.setdefault(section, {}).update(values)
    return validate(raw)


def test_char_tokenizer_validation_sources_and_outputs(tmp_path):
    config = tiny_config(tmp_path)
    trainer = PretrainRecipe(config).run()
    assert trainer.global_step == 6
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "eval/loss" in r] == [3, 6]
    # the char vocabulary is the corpus's characters + eos, pad, unk; the model's follows it
    vocabulary = sorted(set("the quick brown fox jumps over the lazy dog. "))
    recipe_model_vocab = trainer.train_module.model.config.vocab_size
    assert recipe_model_vocab == len(vocabulary) + 3
    checkpoint = Checkpointer.latest_checkpoint(str(tmp_path / "run"))
    assert (tmp_path / "run" / "step6" / "tokenizer" / "tokenizer.json").exists()
    assert checkpoint.endswith("step6")
    saved = (tmp_path / "run" / "config.yaml").read_text()
    assert "kind: char" in saved


def test_custom_callback_by_import_path(tmp_path):
    from tests.helpers import CountingCallback

    CountingCallback.instances.clear()
    config = tiny_config(
        tmp_path, callbacks={"custom": [{"import_path": "tests.helpers:CountingCallback", "kwargs": {"label": "mine"}}]}
    )
    PretrainRecipe(config).run()
    assert len(CountingCallback.instances) == 6 and CountingCallback.instances[0].label == "mine"


def test_bad_callback_import_path_is_a_config_error(tmp_path):
    config = tiny_config(tmp_path, callbacks={"custom": [{"import_path": "tests.helpers:Nope"}]})
    with pytest.raises(ConfigError, match=r"callbacks.custom\[0\].import_path: cannot import 'tests.helpers:Nope'"):
        PretrainRecipe(config).run()


def test_samples_every_interval_leave_training_unchanged(tmp_path):
    import torch

    from honing.models.wrappers import unwrap_model

    def run(folder, sample):
        model = {"config": {**TINY_LLAMA_CONFIG, "attention_dropout": 0.1}}
        folder.mkdir()
        config = tiny_config(
            folder,
            model=model,
            callbacks={"sample": sample, "checkpointer": {"save_interval": 3}, "console": {"enabled": False}},
        )
        recipe = PretrainRecipe(config)
        trainer = recipe.run()
        return recipe, torch.cat([p.detach().flatten() for p in trainer.train_module.model.parameters()])

    recipe, sampled = run(tmp_path / "a", {"enabled": True, "prompts": ["the "], "interval": 2, "max_new_tokens": 3})
    _, plain = run(tmp_path / "b", {"enabled": False})
    steps = [json.loads(line)["step"] for line in (tmp_path / "a" / "run" / "samples.jsonl").read_text().splitlines()]
    assert steps == [2, 4, 6]
    # generation switches to eval mode (no dropout) and back, and draws from a forked RNG
    assert torch.equal(sampled, plain)
    model = unwrap_model(recipe.model)
    model.train()
    recipe.outputs.generate_text("the ")
    assert model.training and all(m.training for m in model.modules())


def test_lora_freezing_param_groups_and_best_model_work_for_pretraining_too(tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    config = tiny_config(
        tmp_path,
        model={
            "lora": {"rank": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj", "down_proj"]},
            "freeze_layers": ["*down_proj.lora_B*"],
        },
        optim={"param_groups": [{"params": "*v_proj*", "lr": 1e-2}]},
        callbacks={
            "checkpointer": {"save_interval": 3},
            "evaluator": {"interval": 3, "metric_for_best_model": "eval/loss"},
            "sample": {"enabled": False},
            "console": {"enabled": False},
        },
    )
    recipe = PretrainRecipe(config)
    trainer = recipe.run()
    run = tmp_path / "run"
    assert isinstance(recipe.model, PeftModel)
    groups = {group["name"]: group for group in trainer.train_module.optimizer.param_groups}
    assert groups["param_groups.0"]["initial_lr"] == 1e-2
    frozen = [name for name, p in recipe.model.named_parameters() if "down_proj.lora_B" in name]
    assert frozen and not any(p.requires_grad for name, p in recipe.model.named_parameters() if name in frozen)
    # the adapter, the merged export and the best checkpoint's export, as for SFT
    assert (run / "adapter" / "adapter_config.json").exists()
    assert AutoModelForCausalLM.from_pretrained(run / "hf") is not None and (run / "best" / "config.json").exists()
