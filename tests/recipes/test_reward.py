"""Reward model recipe: a tiny run with LoRA and full fine-tuning, TRL's metric names with held-out accuracy, an
``hf/`` export that AutoModelForSequenceClassification loads and that scores as the trained model, margins carried
from the rows, exact resume, rows prepared once, and the keys it cannot use refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSequenceClassification

from honing.config import ConfigError, load_config, validate
from honing.errors import DataError
from honing.methods.reward import pair_rewards
from honing.recipes.reward import RewardRecipe
from tests.recipes.pair_runs import pair_run
from tests.recipes.test_prepared_rows import assert_same_training

TRL_METRICS = ("loss", "accuracy", "margin", "mean_reward", "rewards/chosen", "rewards/rejected")


def raw_config(tmp_path, name="run", steps=3, **sections):
    """A tiny reward model on generated addition pairs (LoRA), evaluated every 2 steps by held-out accuracy."""
    raw = pair_run(tmp_path, "reward", name, steps=steps, validation_samples=5, **sections)
    raw["callbacks"].pop("sample")  # a score head samples no text: the key is refused
    raw["callbacks"]["evaluator"]["metric_for_best_model"] = "eval/accuracy"
    return raw


def metrics(folder):
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def write_pairs(path, margins):
    """Pairs "Copy: x" → "x" over "y" (TRL's prompt / chosen / rejected) with the given ``margin`` column values."""
    with open(path, "w", encoding="utf-8") as handle:
        for index, margin in enumerate(margins):
            row = {"prompt": f"Copy: {'abcdef'[index % 6]}", "chosen": "abcdef"[index % 6], "rejected": "z"}
            if margin is not None:
                row["margin"] = margin
            handle.write(json.dumps(row) + "\n")
    return str(path)


@pytest.mark.parametrize("lora", [True, False])
def test_a_run_trains_and_exports_a_sequence_classifier_that_scores_as_the_trained_model(tmp_path, lora):
    raw = raw_config(tmp_path) if lora else raw_config(tmp_path, model={"lora": None})
    recipe = RewardRecipe(validate(raw))
    trainer = recipe.run()
    assert trainer.global_step == 3
    rows = metrics(tmp_path / "run")
    for key in TRL_METRICS:
        assert any(f"train/{key}" in row for row in rows), key
        assert any(f"eval/{key}" in row for row in rows), key
    accuracy = [row["eval/accuracy"] for row in rows if "eval/accuracy" in row]
    assert all(0.0 <= value <= 1.0 for value in accuracy)

    exported = AutoModelForSequenceClassification.from_pretrained(tmp_path / "run" / "hf").eval()
    assert exported.config.num_labels == 1 and exported.config.pad_token_id == recipe.tokenizer.pad_token_id
    assert (tmp_path / "run" / "adapter" / "adapter_config.json").exists() == lora
    batch = next(iter(recipe.eval_batches))
    micro = recipe.collator.split(batch, 8)[0]
    recipe.model.eval()
    with torch.no_grad():
        trained = pair_rewards(recipe.model, micro, recipe.collator, packed=recipe.packed_pairs)
        scored = pair_rewards(exported, micro, recipe.collator, packed=False)
    assert trained.abs().sum() > 0
    assert torch.allclose(trained, scored, atol=1e-5)


def test_a_stopped_run_resumes_to_the_same_weights(tmp_path):
    section = {"reward": {"center_rewards_coefficient": 0.01}}
    reference = RewardRecipe(validate(raw_config(tmp_path, "straight", steps=4, **section)))
    reference.run()
    stopped = RewardRecipe(
        validate(raw_config(tmp_path, "resumed", steps=4, trainer={"hard_stop": "3steps"}, **section))
    )
    assert stopped.run().global_step == 3
    resumed = RewardRecipe(validate(raw_config(tmp_path, "resumed", steps=4, **section)))
    assert resumed.run().global_step == 4
    left, right = reference.model.state_dict(), resumed.model.state_dict()
    assert sorted(left) == sorted(right) and all(torch.equal(left[name], right[name]) for name in left)


def test_padded_pairs_train_as_packed_ones(tmp_path):
    packed = RewardRecipe(validate(raw_config(tmp_path, "packed", model={"lora": None}))).run()
    padded = RewardRecipe(
        validate(raw_config(tmp_path, "padded", model={"lora": None}, reward={"packed_pairs": False}))
    )
    padded.run()
    left = [row["train/loss"] for row in metrics(tmp_path / "packed") if "train/loss" in row]
    right = [row["train/loss"] for row in metrics(tmp_path / "padded") if "train/loss" in row]
    assert packed.global_step == 3 and left == pytest.approx(right, abs=1e-5)


def test_margins_come_from_the_rows_and_raise_the_loss(tmp_path):
    train = {"sources": [{"path": write_pairs(tmp_path / "margins.jsonl", [1.0, 2.0, None, 0.5])}]}
    recipe = RewardRecipe(validate(raw_config(tmp_path, data={"train": train, "validation": None})))
    recipe.build()
    batch = recipe.collator(list(recipe.train_loader.dataset))
    assert batch["margin"].tolist() == [1.0, 2.0, 0.0, 0.5]
    micro = recipe.collator.split(batch, 8)[0]
    with torch.no_grad():
        with_margins = recipe.train_module.pair_terms(micro)["losses"]
        without = recipe.train_module.pair_terms({**micro, "margin": torch.zeros(4)})["losses"]
    assert with_margins[2] == pytest.approx(without[2].item()) and bool(
        (with_margins[[0, 1, 3]] > without[[0, 1, 3]]).all()
    )


def test_a_margin_that_is_not_a_number_is_a_bad_row(tmp_path):
    train = {"sources": [{"path": write_pairs(tmp_path / "bad.jsonl", [1.0, "big"])}]}
    with pytest.raises(DataError, match="'margin' must be a finite number, got 'big'"):
        RewardRecipe(validate(raw_config(tmp_path, data={"train": train, "validation": None}))).build()


def test_rows_and_margins_prepared_once_train_bit_identically(tmp_path):
    margins = {"path": write_pairs(tmp_path / "margins.jsonl", [3.0, None, 1.0, 2.0] * 4)}
    sources = [{"path": "generated:addition_preference?samples=32&seed=0"}, margins]
    data = {"overlong": "truncate", "seq_len": 24, "train": {"sources": sources}}
    raw = raw_config(tmp_path, data=data, model={"lora": None})
    losses, reports = assert_same_training(RewardRecipe, raw, tmp_path, steps=3)
    assert reports["train"]["truncated"] > 0 and len(losses) == 3


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            {"callbacks": {"generation_eval": {"enabled": True}}},
            "callbacks.generation_eval: not used by method 'reward'",
        ),
        ({"callbacks": {"sample": {"enabled": False}}}, "callbacks.sample: not used by method 'reward'"),
        (
            {"model": {"lora": {"task_type": "CAUSAL_LM"}}},
            "model.lora.task_type: 'CAUSAL_LM' not used by method 'reward'",
        ),
        ({"model": {"quantize": "nf4"}}, "model.quantize: not used by method 'reward'"),
        ({"dpo": {"beta": 0.1}}, "dpo: not used by method 'reward'"),
    ],
)
def test_keys_the_method_does_not_use_are_refused_in_one_line(tmp_path, section, message):
    raw = raw_config(tmp_path)
    for key, value in section.items():
        raw[key] = {**raw.get(key, {}), **value} if key != "model" else {**raw["model"], **value}
    with pytest.raises(ConfigError) as info:
        validate(raw)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_the_example_scores_the_simpo_examples_pairs_from_its_model():
    configs = Path(__file__).resolve().parents[2] / "configs"
    reward, simpo = (load_config(str(configs / name), []) for name in ("reward.yaml", "simpo.yaml"))
    assert reward.method == "reward" and reward.reward.center_rewards_coefficient == 0.01
    assert reward.data.train == simpo.data.train and reward.data.validation == simpo.data.validation
    assert reward.model.name_or_path == f"{simpo.trainer.save_folder}/hf"
