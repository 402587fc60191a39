"""The KTO recipe: the first step's closed form (0.5), TRL's metric names, the three references agree, LoRA, exact
resume, rows prepared once, the KL estimate's mismatched rows, and a held-out preference learnt (tiny)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from honing.config import ConfigError, validate
from honing.recipes.kto import KTORecipe
from tests.recipes.pair_runs import pair_run
from tests.recipes.test_prepared_rows import assert_same_training
from tests.recipes.test_reference_free import copy_pairs

TRL_METRICS = ("loss", "rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen", "logps/rejected", "kl")


def raw_config(tmp_path, name="run", *, steps=3, **sections):
    """A tiny KTO run on generated addition pairs turned unpaired, LoRA, evaluation every 2 steps."""
    raw = pair_run(tmp_path, "kto", name, steps=steps, validation_samples=5, **sections)
    raw["callbacks"]["evaluator"]["metric_for_best_model"] = "eval/rewards/margins"
    return raw


def metrics(folder):
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def test_the_references_give_the_same_first_steps_from_one_half(tmp_path):
    runs = {}
    for reference in ("copy", "adapters_off", "precompute", "lazy"):
        section = {"reference": reference, "beta": 0.5, "kl_pairing": "split"}  # what precompute and lazy can score
        recipe = KTORecipe(validate(raw_config(tmp_path, reference, kto=section)))
        assert recipe.run().global_step == 3
        runs[reference] = [row for row in metrics(tmp_path / reference) if "train/loss" in row]
    first = runs["copy"][0]
    assert first["train/loss"] == 0.5 and first["train/kl"] == 0.0  # policy = reference: every row loses 1/2
    for reference in ("adapters_off", "precompute", "lazy"):
        for step, row in enumerate(runs[reference]):
            for name in TRL_METRICS:
                key = f"train/{name}"
                assert row[key] == pytest.approx(runs["copy"][step][key], abs=1e-6), (reference, step, key)
    assert runs["copy"][-1]["train/kl"] > 0  # the policy has moved: the mismatched rows' log-ratio is seen
    last = metrics(tmp_path / "copy")[-1]
    assert all(f"eval/{name}" in last for name in TRL_METRICS)
    assert (tmp_path / "copy" / "adapter" / "adapter_config.json").exists()  # LoRA: the adapter is exported
    assert (tmp_path / "copy" / "best" / "config.json").exists()  # chosen by eval/rewards/margins


def test_a_stopped_run_resumes_to_the_same_weights(tmp_path):
    section = {"kto": {"desirable_weight": 1.2, "undesirable_weight": 0.8}}
    straight = KTORecipe(validate(raw_config(tmp_path, "straight", steps=4, **section)))
    straight.run()
    stopped = KTORecipe(validate(raw_config(tmp_path, "resumed", steps=4, trainer={"hard_stop": "3steps"}, **section)))
    assert stopped.run().global_step == 3
    resumed = KTORecipe(validate(raw_config(tmp_path, "resumed", steps=4, **section)))
    assert resumed.run().global_step == 4
    left, right = straight.model.state_dict(), resumed.model.state_dict()
    assert sorted(left) == sorted(right) and all(torch.equal(left[name], right[name]) for name in left)


def test_rows_prepared_once_train_bit_identically(tmp_path):
    raw = raw_config(tmp_path, data={"overlong": "truncate", "seq_len": 24}, model={"lora": None})
    _, reports = assert_same_training(KTORecipe, raw, tmp_path, steps=3)
    assert reports["train"]["truncated"] > 0 and reports["train"]["examples"] == 64  # 32 pairs, 2 rows each


def test_each_row_is_scored_with_another_rows_completion(tmp_path):
    recipe = KTORecipe(validate(raw_config(tmp_path, kto={"kl_pairing": "split"})))
    recipe.build()
    dataset = recipe.train_loader.dataset
    rows = dataset.pairs
    assert sum(dataset.desirable) == len(rows) // 2  # each pair: a desirable and an undesirable row
    completions = [tuple(row.chosen_ids) for row in rows]
    mismatched = [tuple(row.rejected_ids) for row in rows]
    assert sorted(mismatched) == sorted(completions)  # one cycle through every row: each completion used once
    assert sum(m == c for m, c in zip(mismatched, completions)) < len(rows) // 4  # rarely one's own (a repeat)
    apo = KTORecipe(validate(raw_config(tmp_path, "apo", kto={"loss_type": "apo_zero_unpaired"})))
    apo.build()
    assert all(row.rejected_ids == row.chosen_ids[:1] for row in apo.train_loader.dataset.pairs)  # no KL: one token


def test_by_default_each_micro_batch_scores_its_own_completions_rotated(tmp_path):
    recipe = KTORecipe(validate(raw_config(tmp_path, data={"micro_batch_size": 2})))
    recipe.build()
    items = [recipe.train_loader.dataset[index] for index in range(5)]
    batch = recipe.collator(items)
    segments = batch["segments"].tolist()
    # runs of 2 rows (the micro-batches) swap completions; the last row, alone in its run, scores its own
    for row, other in enumerate(items[index] for index in (1, 0, 3, 2, 4)):
        prompt, completion, mismatched = segments[row]
        ids = batch["input_ids"][row, prompt + completion : prompt + completion + mismatched].tolist()
        assert ids == list(other["chosen_ids"])


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        ({"kto": {"loss_type": "sigmoid"}}, "config: kto.loss_type"),
        ({"kto": {"reference": "precompute"}}, "set kto.kl_pairing: split"),
        ({"kto": {"rpo_alpha": 1.0}}, "config: kto.rpo_alpha"),
        ({"kto": {"reference": "adapters_off"}, "model": {"lora": None}}, "kto.reference: 'adapters_off' needs"),
        ({"dpo": {"beta": 0.2}}, "config: dpo: not used by method 'kto' (used by: dpo, vl_dpo)"),
    ],
)
def test_keys_and_values_it_cannot_use_are_refused_in_one_line(tmp_path, sections, message):
    with pytest.raises(ConfigError) as info:
        KTORecipe(validate(raw_config(tmp_path, **sections))).run()
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)


@pytest.mark.slow
def test_a_held_out_preference_is_learnt(tmp_path):
    # the example's course in small (configs/kto.yaml): pairs turned unpaired, from an untrained model; held-out pairs
    # ranked at chance first, then their chosen reply's reward above the rejected one's
    data = {
        "train": {"sources": [{"path": copy_pairs(tmp_path / "train.jsonl", 2000, seed=0)}]},
        "validation": {"sources": [{"path": copy_pairs(tmp_path / "held_out.jsonl", 32, seed=1)}]},
        "global_batch_size": 16,
        "micro_batch_size": 16,
    }
    raw = raw_config(tmp_path, data=data, steps=300, optim={"lr": 1e-3}, kto={"beta": 0.3})
    raw["model"] = {"config": {**raw["model"]["config"], "hidden_size": 64, "num_hidden_layers": 2}}
    raw["model"]["config"]["intermediate_size"] = 128
    raw["callbacks"]["evaluator"]["interval"] = 150
    raw["callbacks"]["checkpointer"]["save_interval"] = 1000
    KTORecipe(validate(raw)).run()
    rows = [row for row in metrics(tmp_path / "run") if "eval/rewards/accuracies" in row]
    accuracy = [row["eval/rewards/accuracies"] for row in rows]
    assert len(rows) == 2 and accuracy[0] < 0.6 and accuracy[-1] >= 0.8, accuracy
    assert rows[-1]["eval/rewards/margins"] > 0.2 > rows[0]["eval/rewards/margins"]


def test_qlora_trains_the_adapters_against_the_quantized_base_with_its_adapters_off(tmp_path):
    pytest.importorskip("torchao")
    from honing.models.quantize import is_quantized

    raw = raw_config(tmp_path, model={"quantize": "nf4"}, kto={"reference": "adapters_off"})
    recipe = KTORecipe(validate(raw))
    assert recipe.run().global_step == 3
    assert any(is_quantized(param) for param in recipe.model.parameters()) and recipe.reference_model is None
    losses = [row["train/loss"] for row in metrics(tmp_path / "run") if "train/loss" in row]
    assert losses[0] == 0.5 and len(losses) == 3 and all(math.isfinite(loss) for loss in losses)
    assert (tmp_path / "run" / "hf" / "model.safetensors").exists()  # de-quantized and merged
