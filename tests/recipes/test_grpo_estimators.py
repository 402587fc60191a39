"""GSPO, RLOO and DAPO's dynamic sampling end to end: groups of equal rewards dropped, refilled and counted, the
round limit respected, and a tiny run of each estimator that stops and resumes to the same weights."""

from __future__ import annotations

import math

import pytest
import torch

from honing.config import validate
from honing.errors import ConfigError
from honing.recipes.grpo import GRPORecipe
from tests.recipes.test_grpo import grpo_raw, read_jsonl

# a reward that is 0 for every completion of some prompts (their groups are all equal) and spread for the others
FLAT_REWARD = """
def flat_for_some(prompts, completions, **columns):
    scores = []
    for prompt, completion in zip(prompts, completions):
        question = prompt[-1]["content"] if isinstance(prompt, list) else prompt
        text = completion[0]["content"] if isinstance(completion, list) else completion
        flat = len(question) % {modulus} != 0
        scores.append(0.0 if flat else float(sum(map(ord, text)) % 7))
    return scores
"""


def with_reward(tmp_path, monkeypatch, modulus):
    """The reward module in ``tmp_path``: prompts whose question length is not a multiple of ``modulus`` get 0."""
    name = f"flat_reward_{modulus}"
    (tmp_path / f"{name}.py").write_text(FLAT_REWARD.format(modulus=modulus))
    monkeypatch.syspath_prepend(str(tmp_path))
    return [{"name": f"{name}:flat_for_some"}]


def groups_of(samples, step, size=4):
    rows = [row for row in samples if row["step"] == step][-8:]  # the step's trained groups (2 prompts x G = 4)
    return [[row["reward"] for row in rows[i : i + size]] for i in range(0, len(rows), size)]


def test_equal_groups_are_dropped_refilled_and_counted(tmp_path, monkeypatch):
    rewards = with_reward(tmp_path, monkeypatch, modulus=2)
    raw = grpo_raw(tmp_path, rewards=rewards, filter_groups={"enable": True, "max_num_gen_batches": 6})
    GRPORecipe(validate(raw)).run()
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    samples = read_jsonl(tmp_path / "run" / "samples.jsonl")
    assert sum(row["train/dynamic_sampling/dropped_groups"] for row in rows) > 0
    for row in rows:
        assert 1 <= row["train/num_gen_batches"] <= 6
        assert (row["train/num_gen_batches"] > 1) == (row["train/dynamic_sampling/refill_prompts"] > 0)
        if row["train/dynamic_sampling/equal_groups_kept"] == 0:  # filled: every trained group teaches something
            assert all(len(set(group)) > 1 for group in groups_of(samples, row["step"])), row["step"]
        assert row["train/frac_reward_zero_std"] == pytest.approx(row["train/dynamic_sampling/equal_groups_kept"] / 2)


def test_the_round_limit_keeps_dropped_groups_once_reached(tmp_path, monkeypatch):
    rewards = with_reward(tmp_path, monkeypatch, modulus=7)  # most prompts give equal rewards
    raw = grpo_raw(tmp_path, rewards=rewards, filter_groups={"enable": True, "max_num_gen_batches": 2})
    GRPORecipe(validate(raw)).run()
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert all(row["train/num_gen_batches"] <= 2 for row in rows)
    assert any(row["train/dynamic_sampling/equal_groups_kept"] > 0 for row in rows)
    for row in rows:
        short = row["train/dynamic_sampling/equal_groups_kept"] > 0
        assert not short or row["train/num_gen_batches"] == 2  # kept only after the last round


ESTIMATORS = {
    "gspo": {"grpo": {"importance_sampling_level": "sequence", "loss_type": "grpo"}},
    "gspo_token": {"grpo": {"importance_sampling_level": "sequence_token"}},
    "rloo": {"rloo": {"beta": 0.05, "normalize_advantages": True}},
    "dapo": {"grpo": {"filter_groups": {"enable": True, "max_num_gen_batches": 3}, "epsilon_high": 0.28}},
    # TRL 1.16's loss types and keys: CISPO's ε_max, unfinished completions masked, the high-entropy tokens only;
    # VESPO with GDPO's aggregation
    "cispo": {
        "grpo": {
            "loss_type": "cispo",
            "epsilon_high": 5.0,
            "mask_truncated_completions": True,
            "top_entropy_quantile": 0.5,
        }
    },
    "vespo": {"grpo": {"loss_type": "vespo", "multi_objective_aggregation": "normalize_then_sum"}},
}


def estimator_raw(tmp_path, name, estimator, rewards, **trainer):
    raw = grpo_raw(tmp_path / name, rewards=rewards, num_iterations=2)
    raw["trainer"].update(trainer)
    section = ESTIMATORS[estimator]
    if "rloo" in section:  # under LoRA: the reference is the model with its adapters off
        raw["method"] = "rloo"
        raw["rloo"] = {**raw.pop("grpo"), **section["rloo"]}
        raw["model"]["lora"] = {"rank": 4, "alpha": 8}
    else:
        raw["grpo"].update(section["grpo"])
    return raw


@pytest.mark.parametrize("estimator", sorted(ESTIMATORS))
def test_each_estimator_trains_and_resumes_exactly(tmp_path, monkeypatch, estimator):
    rewards = with_reward(tmp_path, monkeypatch, modulus=2)
    straight = GRPORecipe(validate(estimator_raw(tmp_path, "straight", estimator, rewards)))
    assert straight.run().global_step == 3
    stopped = GRPORecipe(validate(estimator_raw(tmp_path, "resumed", estimator, rewards, hard_stop="2steps")))
    assert stopped.run().global_step == 2
    resumed = GRPORecipe(validate(estimator_raw(tmp_path, "resumed", estimator, rewards)))
    assert resumed.run().global_step == 3
    # it resumed from step 2's checkpoint: step 3 alone was trained again
    assert [row["step"] for row in read_jsonl(tmp_path / "resumed" / "run" / "metrics.jsonl")] == [1, 2, 3]
    left, right = straight.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(left[name], right[name]) for name in left)
    assert not all(torch.equal(left[name], stopped.model.state_dict()[name]) for name in left)  # step 3 trained
    rows = read_jsonl(tmp_path / "straight" / "run" / "metrics.jsonl")
    assert all(math.isfinite(row["train/loss"]) for row in rows)
    if estimator == "rloo":
        assert straight.reference_model is None and rows[-1]["train/kl"] != 0.0  # the KL to the adapters-off model
    if estimator in ("cispo", "vespo"):  # TRL's metric of the loss type, in place of the clip ratios
        name = {"cispo": "train/cispo_clip_ratio", "vespo": "train/vespo/phi_seq_mean"}[estimator]
        assert all(name in row and "train/clip_ratio/low_mean" not in row for row in rows)


def test_rloo_needs_its_section_and_refuses_grpos(tmp_path):
    raw = grpo_raw(tmp_path)
    raw["method"] = "rloo"
    with pytest.raises(ConfigError, match="grpo: not used by method 'rloo'"):
        validate(raw)
    del raw["grpo"]
    with pytest.raises(ConfigError, match="rloo: method 'rloo' needs a rloo section"):
        GRPORecipe(validate(raw))
    raw["rloo"] = {"rewards": [{"name": "sharp_5tokens_completions"}], "loss_type": "grpo"}
    with pytest.raises(ConfigError, match="rloo.loss_type"):
        validate(raw)
