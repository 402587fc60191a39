"""ORPO and CPO / SimPO recipes: a held-out preference learnt, no reference held, TRL's metric names, LoRA, exact
resume, rows prepared once (DPO's), and every key used or refused in one line."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch

from honing.config import ConfigError, validate
from honing.data.preference.batches import PairCollator
from honing.recipes.dpo import DPORecipe
from honing.recipes.prepare_rows import prepare_split
from honing.recipes.reference_free import ReferenceFreeRecipe
from tests.recipes.pair_runs import pair_run
from tests.recipes.test_prepared_rows import assert_same_training, train

LETTERS = "abcdefghijklmnopqrstuvwxyz"
TRL_METRICS = (
    "loss",
    "rewards/chosen",
    "rewards/rejected",
    "rewards/accuracies",
    "rewards/margins",
    "logps/chosen",
    "logps/rejected",
    "nll_loss",
)
SIMPO = {"loss_type": "simpo", "cpo_alpha": 0.0, "beta": 2.0, "simpo_gamma": 0.5}


def copy_pairs(path, count: int, seed: int):
    """``count`` pairs "Copy: x" → "x" preferred over another letter (Oumi's ``messages`` + ``chosen`` /
    ``rejected``), written to ``path``."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as handle:
        for _ in range(count):
            letter = rng.choice(LETTERS)
            other = rng.choice(LETTERS.replace(letter, ""))
            row = {"messages": [{"role": "user", "content": f"Copy: {letter}"}], "chosen": letter, "rejected": other}
            handle.write(json.dumps(row) + "\n")
    return str(path)


def raw_config(tmp_path, method="orpo", name="run", **sections):
    """A tiny run of ``method`` on generated addition pairs, LoRA, evaluation every 2 steps."""
    return pair_run(tmp_path, method, name, steps=4, validation_samples=5, **sections)


def metrics(folder):
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(("method", "section", "least"), [("orpo", {"beta": 0.5}, 0.9), ("cpo", SIMPO, 0.75)])
def test_a_held_out_preference_is_learnt(tmp_path, method, section, least):
    data = {
        "train": {"sources": [{"path": copy_pairs(tmp_path / "train.jsonl", 2000, seed=0)}]},
        "validation": {"sources": [{"path": copy_pairs(tmp_path / "held_out.jsonl", 64, seed=1)}]},
        "global_batch_size": 16,
        "micro_batch_size": 16,
    }
    model = {"config": {"hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128}, "lora": None}
    raw = raw_config(tmp_path, method, data=data, trainer={"max_duration": "120steps"}, optim={"lr": 5e-3})
    raw["model"] = {"config": {**raw["model"]["config"], **model["config"]}}
    raw["callbacks"]["evaluator"]["interval"] = 30
    raw[method] = section
    ReferenceFreeRecipe(validate(raw)).run()
    accuracy = [row["eval/rewards/accuracies"] for row in metrics(tmp_path / "run") if "eval/rewards/accuracies" in row]
    assert len(accuracy) == 4 and accuracy[0] < 0.7 and accuracy[-1] >= least, accuracy


@pytest.mark.parametrize(("method", "section"), [("orpo", {}), ("cpo", {"loss_type": "sigmoid"}), ("cpo", SIMPO)])
def test_no_reference_is_held_and_the_metrics_carry_trls_names(tmp_path, method, section):
    recipe = ReferenceFreeRecipe(validate(raw_config(tmp_path, method, **{method: section})))
    recipe.run()
    assert recipe.reference_model is None and recipe.train_module.reference == "none"
    held = {id(t) for t in recipe.model.parameters()} | {id(t) for t in recipe.model.buffers()}
    assert all(id(t) in held for t in recipe.train_module.model.parameters())
    extra = ("log_odds_ratio", "log_odds_chosen") if method == "orpo" else ()
    rows = metrics(tmp_path / "run")
    train_rows, eval_rows = [r for r in rows if "train/loss" in r], [r for r in rows if "eval/loss" in r]
    assert len(train_rows) == 4 and len(eval_rows) == 2
    for name in TRL_METRICS + extra:
        assert all(f"train/{name}" in row and f"eval/{name}" in eval_rows[-1] for row in train_rows), name
    assert (tmp_path / "run" / "adapter" / "adapter_config.json").exists()  # LoRA: the adapter is exported
    assert (tmp_path / "run" / "best" / "config.json").exists()  # chosen by eval/rewards/accuracies


def test_orpo_loss_is_its_nll_plus_the_odds_ratio_term(tmp_path):
    ReferenceFreeRecipe(validate(raw_config(tmp_path, orpo={"beta": 0.3}))).run()
    for row in metrics(tmp_path / "run"):
        for split in ("train", "eval"):
            if f"{split}/loss" in row:
                odds_term = -0.3 * row[f"{split}/log_odds_ratio"]
                assert row[f"{split}/loss"] == pytest.approx(row[f"{split}/nll_loss"] + odds_term, abs=1e-5)


def test_a_stopped_run_resumes_to_the_same_weights(tmp_path):
    section = {"cpo": {"loss_type": "ipo", "cpo_alpha": 0.5}}
    reference = ReferenceFreeRecipe(validate(raw_config(tmp_path, "cpo", "straight", **section)))
    reference.run()
    stopped = raw_config(tmp_path, "cpo", "resumed", trainer={"hard_stop": "3steps"}, **section)
    stopped = ReferenceFreeRecipe(validate(stopped))
    assert stopped.run().global_step == 3
    resumed = ReferenceFreeRecipe(validate(raw_config(tmp_path, "cpo", "resumed", **section)))
    assert resumed.run().global_step == 4
    left, right = reference.model.state_dict(), resumed.model.state_dict()
    assert sorted(left) == sorted(right) and all(torch.equal(left[name], right[name]) for name in left)


def test_orpo_from_rows_prepared_once_trains_bit_identically(tmp_path):
    raw = raw_config(tmp_path, data={"overlong": "truncate", "seq_len": 24}, model={"lora": None})
    losses, reports = assert_same_training(ReferenceFreeRecipe, raw, tmp_path, steps=4)
    assert reports["train"]["truncated"] > 0
    # DPO's prepared rows are the same rows: a folder `honing prepare` made for a DPO config trains ORPO
    dpo = raw_config(tmp_path, "dpo", data={"overlong": "truncate", "seq_len": 24}, model={"lora": None})
    prepare_split(DPORecipe(validate(dpo)), str(tmp_path / "dpo-rows"))
    raw["data"]["train"] = {"sources": [{"path": str(tmp_path / "dpo-rows")}]}
    assert train(ReferenceFreeRecipe, raw, tmp_path / "from-dpo-rows")[0] == losses


def test_filler_pairs_of_uneven_validation_batches_count_nothing(tmp_path):
    recipe = ReferenceFreeRecipe(validate(raw_config(tmp_path)))
    recipe.run()
    module, collator = recipe.train_module, recipe.collator
    assert isinstance(collator, PairCollator)
    batch = next(iter(recipe.eval_batches))
    real, filler = module.eval_batch(batch), module.eval_batch(collator.filler(batch))
    assert filler["pairs"].item() == 0 and all(torch.isfinite(value) for value in filler.values())
    assert real["pairs"].item() == len(batch["input_ids"])


@pytest.mark.parametrize(
    ("method", "section", "message"),
    [
        ("orpo", {"reference": "copy"}, "config: orpo.reference"),
        ("orpo", {"loss_type": "simpo"}, "config: orpo.loss_type"),
        ("cpo", {"rpo_alpha": 1.0}, "config: cpo.rpo_alpha"),
        ("cpo", {"simpo_gamma": 1.0}, "cpo.simpo_gamma is used by loss_type 'simpo' only"),
        ("cpo", {"loss_type": "hinge", "label_smoothing": 0.1}, "cpo.label_smoothing is used by loss_type 'sigmoid'"),
        ("cpo", {"loss_type": "alphapo"}, "'alphapo' is TRL's shorthand: write cpo.loss_type: simpo, cpo.cpo_alpha"),
    ],
)
def test_keys_the_method_does_not_use_are_refused_in_one_line(tmp_path, method, section, message):
    with pytest.raises(ConfigError) as info:
        validate(raw_config(tmp_path, method, **{method: section}))
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)


@pytest.mark.parametrize("method", ["orpo", "cpo"])
def test_another_methods_section_is_refused(tmp_path, method):
    with pytest.raises(ConfigError, match=f"config: dpo: not used by method '{method}' \\(used by: dpo, vl_dpo\\)"):
        validate(raw_config(tmp_path, method, dpo={"beta": 0.2}))


def test_qlora_trains_the_adapters_on_a_quantized_base(tmp_path):
    pytest.importorskip("torchao")
    from honing.models.quantize import is_quantized

    recipe = ReferenceFreeRecipe(validate(raw_config(tmp_path, "cpo", model={"quantize": "nf4"}, cpo=SIMPO)))
    assert recipe.run().global_step == 4
    assert any(is_quantized(param) for param in recipe.model.parameters()) and recipe.reference_model is None
    losses = [row["train/loss"] for row in metrics(tmp_path / "run") if "train/loss" in row]
    assert len(losses) == 4 and all(math.isfinite(loss) for loss in losses)
    assert (tmp_path / "run" / "adapter" / "adapter_config.json").exists()
    assert (tmp_path / "run" / "hf" / "model.safetensors").exists()  # de-quantized and merged
