"""Online DPO end to end: a tiny run trains 3 steps with TRL's metric names and pair samples, stops at step 2 and
resumes to the same weights (full fine-tuning and LoRA, whose reference is the model with its adapters off), a
pairwise judge ranks the pairs in place of rewards, and the section's mistakes are one line each."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from honing.config import load_config, validate
from honing.errors import ConfigError, DataError
from honing.recipes.online_dpo import OnlineDPORecipe
from honing.recipes.prerequisites import check_model_inputs
from honing.recipes.reward import RewardRecipe
from honing.rl.reward_model import load_reward_model
from tests.recipes.pair_runs import pair_run
from tests.recipes.test_grpo import grpo_raw, read_jsonl


def online_dpo_raw(tmp_path, **section):
    raw = grpo_raw(tmp_path)
    raw["method"] = "online_dpo"
    raw.pop("grpo")
    # llama's attention dropout is a float, not a Dropout module, which model.disable_dropout (as TRL's) leaves on
    raw["model"]["config"]["attention_dropout"] = 0.0
    raw["online_dpo"] = {
        "max_new_tokens": 12,
        "rewards": [{"name": "sharp_5tokens_completions"}],
        "missing_eos_penalty": 1.0,
        "sample_interval": 1,
        **section,
    }
    return raw


def test_lora_run_records_trls_metrics_and_the_pairs(tmp_path):
    raw = online_dpo_raw(tmp_path)
    raw["model"]["lora"] = {"rank": 4, "alpha": 8}
    recipe = OnlineDPORecipe(validate(raw))
    recipe.run()
    assert recipe.reference_model is None  # the adapters are switched off for the reference
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [row["step"] for row in rows] == [1, 2, 3]
    for key in (
        "train/loss",
        "train/objective/scores",
        "train/objective/scores_margin",
        "train/objective/kl",
        "train/objective/entropy",
        "train/objective/rlhf_reward",
        "train/rewards/chosen",
        "train/rewards/rejected",
        "train/rewards/margins",
        "train/rewards/accuracies",
        "train/logps/chosen",
        "train/logps/rejected",
        "train/val/contain_eos_token",
        "train/beta",
        "optim/grad_norm",
    ):
        assert key in rows[-1], key
    assert rows[0]["train/loss"] == pytest.approx(math.log(2), abs=1e-5)  # step 1: the policy is the reference
    assert rows[0]["train/objective/kl"] == pytest.approx(0.0, abs=1e-5)
    assert rows[-1]["train/objective/kl"] != 0.0  # later steps: the adapters have moved
    assert all(row["train/objective/scores_margin"] >= 0 for row in rows)  # the better of each pair is chosen
    samples = read_jsonl(tmp_path / "run" / "samples.jsonl")
    assert len(samples) == 3 * 2 * 2  # every step's pairs
    for first, second in zip(samples[0::2], samples[1::2]):
        assert first["chosen"] != second["chosen"]
        chosen, rejected = (first, second) if first["chosen"] else (second, first)
        assert chosen["reward"] >= rejected["reward"]


@pytest.mark.parametrize("lora", [False, True])
def test_a_run_stopped_at_step_2_resumes_to_the_same_weights(tmp_path, lora):
    def raw(name, **trainer):
        config = online_dpo_raw(tmp_path / name, beta=0.5)
        config["trainer"].update(trainer)
        if lora:
            config["model"]["lora"] = {"rank": 4, "alpha": 8}
        return validate(config)

    straight = OnlineDPORecipe(raw("straight"))
    assert straight.run().global_step == 3
    assert (straight.reference_model is None) == lora
    stopped = OnlineDPORecipe(raw("resumed", hard_stop="2steps"))
    assert stopped.run().global_step == 2
    resumed = OnlineDPORecipe(raw("resumed"))
    assert resumed.run().global_step == 3
    assert [row["step"] for row in read_jsonl(tmp_path / "resumed" / "run" / "metrics.jsonl")] == [1, 2, 3]
    left, right = straight.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(left[name], right[name]) for name in left)
    assert not all(torch.equal(left[name], stopped.model.state_dict()[name]) for name in left)  # step 3 trained


JUDGE = """
calls = []

def shorter(prompts, completions):
    calls.append(len(prompts))
    return [0 if len(first) <= len(second) else 1 for first, second in completions]

def broken(prompts, completions):
    return [2 for _ in prompts]
"""


def test_a_pairwise_judge_ranks_the_pairs(tmp_path, monkeypatch):
    (tmp_path / "pair_judge.py").write_text(JUDGE)
    monkeypatch.syspath_prepend(str(tmp_path))
    raw = online_dpo_raw(tmp_path, rewards=[], judge="pair_judge:shorter")
    OnlineDPORecipe(validate(raw)).run()
    import pair_judge

    assert pair_judge.calls == [2, 2, 2]  # the step's 2 prompts, each with its pair
    samples = read_jsonl(tmp_path / "run" / "samples.jsonl")
    for first, second in zip(samples[0::2], samples[1::2]):
        chosen, rejected = (first, second) if first["chosen"] else (second, first)
        assert len(chosen["text"]) <= len(rejected["text"]) and chosen["reward"] is None
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert "train/objective/scores" not in rows[-1] and "train/rewards/accuracies" in rows[-1]
    raw = online_dpo_raw(tmp_path / "broken", rewards=[], judge="pair_judge:broken")
    with pytest.raises(DataError, match=r"online_dpo.judge returned \[2, 2\] for 2 pairs"):
        OnlineDPORecipe(validate(raw)).run()


def test_the_sections_mistakes_are_one_line(tmp_path):
    raw = online_dpo_raw(tmp_path, rewards=[])
    with pytest.raises(ConfigError, match="online_dpo: give rewards to rank the two completions") as info:
        OnlineDPORecipe(validate(raw))
    assert "\n" not in str(info.value)
    raw = online_dpo_raw(tmp_path)
    raw["grpo"] = {"rewards": [{"name": "sharp_5tokens_completions"}]}
    with pytest.raises(ConfigError, match="grpo: not used by method 'online_dpo'"):
        validate(raw)
    raw = online_dpo_raw(tmp_path, rewards=[], judge="pair_judge:shorter")
    raw["data"]["validation"] = {"sources": [{"path": "generated:reverse?samples=4&seed=1"}]}
    with pytest.raises(ConfigError, match="a judge alone gives none"):
        OnlineDPORecipe(validate(raw))


@pytest.mark.slow
def test_the_example_raises_the_held_out_reward(tmp_path):
    """configs/online-dpo-letters.yaml, 40 of its 60 steps: the held-out prompts' sampled replies go from no "a" to
    most of their characters (measured: 0.00 at step 0, 0.71 at step 40, 0.96 at step 60)."""
    example = Path(__file__).resolve().parents[2] / "configs" / "online-dpo-letters.yaml"
    overrides = [f"trainer.save_folder={tmp_path / 'run'}", "trainer.max_duration=40steps", "trainer.num_threads=1"]
    OnlineDPORecipe(load_config(str(example), overrides)).run()
    rewards = {
        row["step"]: row["eval/reward"]
        for row in read_jsonl(tmp_path / "run" / "metrics.jsonl")
        if "eval/reward" in row
    }
    assert sorted(rewards) == [0, 20, 40]
    assert rewards[40] > rewards[0] + 0.3, rewards


def test_a_reward_model_ranks_the_pairs(tmp_path):
    """A tiny ``method: reward`` export (``reward_model:PATH``) scores each completion, and the higher of a pair is
    chosen: the samples' rewards are the reward model's own scores of the prompt and reply."""
    raw = pair_run(tmp_path / "reward", "reward", "run", steps=2, validation_samples=2, model={"lora": None})
    raw["callbacks"].pop("sample")
    raw["callbacks"]["evaluator"] = {"enabled": False}
    RewardRecipe(validate(raw)).run()
    path = str(tmp_path / "reward" / "run" / "hf")
    OnlineDPORecipe(
        validate(online_dpo_raw(tmp_path, rewards=[{"name": f"reward_model:{path}"}], missing_eos_penalty=None))
    ).run()
    samples = read_jsonl(tmp_path / "run" / "samples.jsonl")
    assert len(samples) == 3 * 2 * 2
    prompts = [json.loads(sample["prompt"]) for sample in samples]
    replies = [[{"role": "assistant", "content": sample["text"]}] for sample in samples]
    scores = load_reward_model(path)(prompts, replies)
    assert [sample["reward"] for sample in samples] == pytest.approx(scores, abs=1e-5)
    for first, second in zip(samples[0::2], samples[1::2]):
        chosen, rejected = (first, second) if first["chosen"] else (second, first)
        assert chosen["reward"] >= rejected["reward"]


def test_a_missing_reward_model_is_named_before_the_run_starts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    raw = online_dpo_raw(tmp_path, rewards=[{"name": "reward_model:runs/reward/hf"}])
    with pytest.raises(ConfigError, match=r"^online_dpo.rewards\[0\].name: runs/reward/hf does not exist"):
        check_model_inputs(validate(raw))


def test_the_step_is_the_mean_over_its_pairs_whatever_the_micro_batches(tmp_path):
    """Two prompts' pairs in one micro-batch or in two: the same first step (its loss and gradient norm)."""

    def first_step(name, micro_batch_size):
        raw = online_dpo_raw(tmp_path / name)
        raw["data"]["micro_batch_size"] = micro_batch_size
        raw["trainer"]["max_duration"] = "1steps"
        OnlineDPORecipe(validate(raw)).run()
        return read_jsonl(tmp_path / name / "run" / "metrics.jsonl")[0]

    one, two = first_step("one", 2), first_step("two", 1)
    assert one["optim/grad_norm"] > 0
    assert one["optim/grad_norm"] == pytest.approx(two["optim/grad_norm"], rel=1e-5)
    assert one["train/loss"] == pytest.approx(two["train/loss"], abs=1e-6)
