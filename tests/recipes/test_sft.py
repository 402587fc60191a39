import json

import pytest
import torch

from honing.config import validate
from honing.errors import DataError
from honing.recipes.sft import SFTRecipe
from tests.helpers import TINY_LLAMA_CONFIG


def sft_config(tmp_path, **sections):
    raw = {
        "method": "sft",
        "trainer": {"save_folder": str(tmp_path / "run"), "max_duration": "4steps", "num_threads": 1},
        "data": {
            "train": {"sources": [{"path": "generated:reverse?samples=64&seed=0"}]},
            "validation": {"sources": [{"path": "generated:reverse?samples=8&seed=1"}]},
            "chat_template": "chatml",
            "seq_len": 128,
            "global_batch_size": 4,
            "cache_dir": str(tmp_path / "cache"),
        },
        "model": {"config": dict(TINY_LLAMA_CONFIG)},
        "callbacks": {
            "checkpointer": {"save_interval": 2, "keep_last": 1},
            "evaluator": {"interval": 2, "metric_for_best_model": "eval/loss"},
            "sample": {"enabled": False},
            "console": {"enabled": False},
        },
    }
    for section, values in sections.items():
        for key, value in values.items():
            if isinstance(value, dict) and isinstance(raw.get(section, {}).get(key), dict):
                raw[section][key].update(value)
            else:
                raw.setdefault(section, {})[key] = value
    return validate(raw)


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits


def test_lora_run_writes_merged_model_adapter_and_best(tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = sft_config(
        tmp_path,
        model={"lora": {"rank": 4, "alpha": 8, "modules_to_save": ["embed_tokens", "lm_head"]}},
        callbacks={"generation_eval": {"enabled": True, "num_prompts": 3, "max_new_tokens": 4}},
    )
    recipe = SFTRecipe(config)
    trainer = recipe.run()
    run = tmp_path / "run"
    assert trainer.global_step == 4
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "eval/loss" in r] == [2, 4]
    assert [r["step"] for r in rows if "eval/exact_match" in r] == [0, 4]
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    merged = AutoModelForCausalLM.from_pretrained(run / "hf")
    torch.testing.assert_close(logits(merged, ids), logits(recipe.model, ids), atol=1e-5, rtol=0)
    base = AutoModelForCausalLM.from_pretrained(run / "hf")  # any model of the base's shape
    adapted = PeftModel.from_pretrained(base, run / "adapter")
    assert (run / "adapter" / "adapter_config.json").exists() and isinstance(adapted, PeftModel)
    assert (run / "best" / "config.json").exists()
    tokenizer = AutoTokenizer.from_pretrained(run / "hf")
    assert "<|im_start|>" in tokenizer.get_vocab() and "im_start" in tokenizer.chat_template
    assert "lora:" in (run / "config.yaml").read_text()


def test_padding_instead_of_packing_trains_the_same_examples(tmp_path):
    config = sft_config(tmp_path, data={"packing": False})
    recipe = SFTRecipe(config)
    trainer = recipe.run()
    assert trainer.global_step == 4
    batch = next(iter(recipe.train_loader))
    # right-padded to the longest row of the batch; real tokens counted without the padding
    lengths = batch["attention_mask"].sum(dim=1)
    assert batch["input_ids"].shape == (4, int(lengths.max()))
    assert int(batch["num_real_tokens"].sum()) == int(lengths.sum())


def test_alpaca_file_with_byte_tokenizer(tmp_path):
    rows = [{"instruction": f"Say {word}", "input": "", "output": word} for word in ["yes", "no", "maybe"] * 8]
    path = tmp_path / "alpaca.json"
    path.write_text(json.dumps(rows))
    config = sft_config(
        tmp_path,
        data={
            "train": {"sources": [{"path": str(path), "format": "alpaca"}]},
            "validation": None,
            "validation_split": 0.25,
        },
    )
    trainer = SFTRecipe(config).run()
    assert trainer.global_step == 4


def test_bad_row_names_file_and_line(tmp_path):
    path = tmp_path / "chat.jsonl"
    good = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    bad = {"messages": [{"role": "bot", "content": "hi"}]}
    path.write_text("\n".join(json.dumps(row) for row in [good] * 6 + [bad] + [good]) + "\n")
    config = sft_config(tmp_path, data={"train": {"sources": [{"path": str(path)}]}, "validation": None})
    with pytest.raises(DataError, match=r"chat.jsonl:7: .*unknown role 'bot'"):
        SFTRecipe(config).run()
    skipping = sft_config(
        tmp_path,
        data={"train": {"sources": [{"path": str(path)}]}, "validation": None, "bad_rows": "skip", "packing": False},
    )
    assert SFTRecipe(skipping).run().global_step == 4


def test_row_that_truncation_leaves_without_an_answer_is_dropped_as_over_long(tmp_path):
    # the default data.overlong (truncate) keeps the start of a row; a long prompt leaves no assistant token:
    # that is over-long data, counted as dropped, not a bad row that fails the run
    path = tmp_path / "chat.jsonl"
    short = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    long = {"messages": [{"role": "user", "content": "x" * 400}, {"role": "assistant", "content": "ok"}]}
    path.write_text("\n".join(json.dumps(row) for row in [short] * 5 + [long] + [short] * 2) + "\n")
    config = sft_config(
        tmp_path, data={"train": {"sources": [{"path": str(path)}]}, "validation": None, "packing": False}
    )
    recipe = SFTRecipe(config)
    assert recipe.run().global_step == 4
    report = recipe.data_reports["train"]
    assert report.dropped == 1 and report.truncated == 0 and not report.rejected
    # every row lost is still an error
    path.write_text(json.dumps(long) + "\n")
    with pytest.raises(DataError, match="no train example is left"):
        SFTRecipe(sft_config(tmp_path, data={"train": {"sources": [{"path": str(path)}]}, "validation": None})).run()


def test_lora_on_a_pretrained_folder_trains_in_training_mode_with_checkpointing(tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM, LlamaConfig

    shape = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2)
    shape.update(intermediate_size=64)
    AutoModelForCausalLM.from_config(LlamaConfig(vocab_size=300, **shape)).save_pretrained(tmp_path / "base")
    config = sft_config(
        tmp_path,
        model={"config": None, "name_or_path": str(tmp_path / "base"), "lora": {"rank": 4, "dropout": 0.1}},
        tokenizer={"kind": "byte"},
        parallel={"activation_checkpointing": "full"},
    )
    recipe = SFTRecipe(config)
    recipe.build()
    # from_pretrained hands over an eval-mode model inside peft's training-mode wrapper: every module must train
    assert [name for name, module in recipe.model.named_modules() if not module.training] == []
    calls = []
    checkpoint = torch.utils.checkpoint.checkpoint
    monkeypatch.setattr(torch.utils.checkpoint, "checkpoint", lambda *a, **k: calls.append(1) or checkpoint(*a, **k))
    module = recipe.train_module
    module.on_attach(recipe.trainer)
    module.train_batch(next(iter(recipe.train_loader)))
    assert len(calls) >= 2  # both blocks ran checkpointed in the first step
