"""PPO runs end to end on a tiny model: TRL's metric names, LoRA with the adapters off as the reference, the value
model trained beside the policy and saved in the checkpoints, an exact resume (policy and value model), a reward
model folder as the score, and the keys it cannot use refused in one line."""

from __future__ import annotations

import json

import pytest
import torch

from honing.config import ConfigError, validate
from honing.recipes.ppo import PPORecipe
from tests.recipes.test_grpo import grpo_raw

TRL_METRICS = (
    "objective/kl",
    "objective/scores",
    "objective/rlhf_reward",
    "objective/non_score_reward",
    "loss/policy_avg",
    "loss/value_avg",
    "policy/clipfrac_avg",
    "val/clipfrac_avg",
    "policy/approxkl_avg",
)


def ppo_raw(tmp_path, name="run", *, steps=3, **ppo):
    """GRPO's tiny run (reverse words, a 1-layer Llama) as PPO: 4 prompts a step in 2 mini-batches, LoRA."""
    raw = grpo_raw(tmp_path)
    raw["method"] = "ppo"
    del raw["grpo"]
    raw["trainer"].update(save_folder=str(tmp_path / name), max_duration=f"{steps}steps")
    raw["data"].update(global_batch_size=4, micro_batch_size=1)
    raw["model"]["lora"] = {"rank": 4, "alpha": 8}
    raw["callbacks"]["checkpointer"] = {"save_interval": 1}
    raw["ppo"] = {
        "response_length": 8,
        "num_ppo_epochs": 2,
        "num_mini_batches": 2,
        "stop_token": "eos",
        "rewards": [{"name": "sharp_5tokens_completions"}],
        **ppo,
    }
    return raw


def metrics(folder):
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def weights(recipe):
    """The policy's and the value model's weights."""
    state = {f"policy.{k}": v for k, v in recipe.model.state_dict().items()}
    state.update({f"value.{k}": v for k, v in recipe.train_module.value.model.state_dict().items()})
    return state


def test_a_lora_run_trains_the_policy_and_value_model_and_resumes_exactly(tmp_path):
    straight = PPORecipe(validate(ppo_raw(tmp_path, "straight", steps=4, kl_coef=0.1)))
    straight.run()
    assert straight.reference_model is None  # LoRA: the adapters are switched off for the reference
    rows = [row for row in metrics(tmp_path / "straight") if "train/loss" in row]
    assert [row["step"] for row in rows] == [1, 2, 3, 4]
    for name in TRL_METRICS:
        assert all(f"train/{name}" in row for row in rows), name
    assert rows[-1]["train/objective/kl"] != 0  # the policy moved from the reference
    assert (tmp_path / "straight" / "adapter" / "adapter_config.json").exists()

    raw = ppo_raw(tmp_path, "resumed", steps=4, kl_coef=0.1)
    raw["trainer"]["hard_stop"] = "3steps"  # the same run, stopped after its third step's checkpoint
    assert PPORecipe(validate(raw)).run().global_step == 3
    resumed = PPORecipe(validate(ppo_raw(tmp_path, "resumed", steps=4, kl_coef=0.1)))
    assert resumed.run().global_step == 4
    left, right = weights(straight), weights(resumed)
    assert sorted(left) == sorted(right)
    for name in left:
        assert torch.equal(left[name], right[name]), name
    value_head = [name for name in left if name.startswith("value.score")]
    fresh = PPORecipe(validate(ppo_raw(tmp_path, "fresh", steps=1)))
    fresh.build()
    assert value_head and not torch.equal(left[value_head[0]], weights(fresh)[value_head[0]])  # the value model trained


@pytest.mark.parametrize(
    ("ppo", "message"),
    [
        ({"rewards": []}, "ppo.reward_model_path or ppo.rewards"),
        ({"stop_token_id": 2}, "ppo.stop_token and ppo.stop_token_id both set"),
        ({"num_mini_batches": 3}, "ppo.num_mini_batches (3) must divide"),
    ],
)
def test_settings_it_cannot_use_are_refused_in_one_line(tmp_path, ppo, message):
    with pytest.raises(ConfigError) as info:
        PPORecipe(validate(ppo_raw(tmp_path, **ppo))).run()
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_a_reward_model_folder_scores_the_rollouts_and_starts_the_value_model(tmp_path):
    from transformers import LlamaConfig, LlamaForSequenceClassification

    torch.manual_seed(0)
    folder = tmp_path / "reward_model"  # a method: reward export's shape: a one-label sequence classifier
    LlamaForSequenceClassification(
        LlamaConfig(
            vocab_size=260,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            intermediate_size=64,
            num_labels=1,
            pad_token_id=0,
        )  # fmt: skip
    ).save_pretrained(folder)
    raw = ppo_raw(tmp_path, steps=2, reward_model_path=str(folder))
    raw["data"]["validation"] = {"sources": [{"path": "generated:reverse?samples=2&seed=1"}]}
    raw["callbacks"]["evaluator"] = {"interval": 2}
    recipe = PPORecipe(validate(raw))
    recipe.run()
    value_head = recipe.train_module.value.model.score.weight
    assert not torch.equal(value_head, LlamaForSequenceClassification.from_pretrained(folder).score.weight)
    rows = metrics(tmp_path / "run")
    trained = [row for row in rows if "train/loss" in row]
    assert all(row["train/rewards/reward_model/mean"] != 0 for row in trained)  # the model's scores, not zeros
    held_out = [row for row in rows if "eval/reward" in row][-1]
    assert "eval/rewards/sharp_5tokens_completions/mean" in held_out
    assert not any("reward_model" in key for key in held_out if key.startswith("eval/"))  # the functions alone
