"""A trained reward model as a GRPO reward (``reward_model:PATH``): loaded once, each completion scored with its prompt
through the reward model's chat template exactly as the model scored that sequence in training, in batches; a tiny
GRPO run trains on it; a folder that is no reward model is refused in one line."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, LlamaConfig

from honing.config import validate
from honing.data.preference.pairs import load_pairs
from honing.errors import ConfigError
from honing.methods.reward import pair_rewards
from honing.recipes.grpo import GRPORecipe
from honing.recipes.reward import RewardRecipe
from honing.rl.reward_model import RewardModelScorer, load_reward_model
from honing.rl.rewards import RewardScorer, resolve_reward
from tests.recipes.pair_runs import pair_run
from tests.recipes.test_grpo import grpo_raw


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny reward model trained 3 steps on addition pairs: its recipe and its ``hf/`` export."""
    tmp_path = tmp_path_factory.mktemp("reward")
    raw = pair_run(tmp_path, "reward", "run", steps=3, validation_samples=6, model={"lora": None})
    raw["callbacks"].pop("sample")
    raw["callbacks"]["evaluator"].pop("metric_for_best_model")
    recipe = RewardRecipe(validate(raw))
    recipe.run()
    return recipe, str(tmp_path / "run" / "hf")


def test_completions_are_scored_as_the_trained_model_scored_their_sequences(trained):
    recipe, path = trained
    scorer = resolve_reward(f"reward_model:{path}")
    assert isinstance(scorer, RewardModelScorer) and resolve_reward(f"reward_model:{path}") is scorer  # loaded once
    fields = recipe.row_kind(recipe.parts.assets).source_fields(recipe.config.data.validation.sources)
    pairs = load_pairs(fields).pairs
    prompts = [pair.prompt for pair in pairs] * 2
    completions = [pair.chosen for pair in pairs] + [pair.rejected for pair in pairs]
    scores = scorer(prompts=prompts, completions=completions)

    dataset = recipe.eval_batches.dataset
    micro = recipe.collator([dataset[index] for index in range(len(dataset))])
    recipe.model.eval()
    with torch.no_grad():
        trained_rewards = pair_rewards(recipe.model, micro, recipe.collator, packed=recipe.packed_pairs)
    assert len(pairs) == trained_rewards.shape[0] == 6
    assert torch.allclose(torch.tensor(scores), trained_rewards.T.reshape(-1), atol=1e-5)
    # one sequence per forward scores the same as the padded batches
    one_by_one = RewardModelScorer(scorer.model, scorer.tokenizer, batch_size=1)
    assert one_by_one(prompts=prompts, completions=completions) == pytest.approx(scores, abs=1e-5)
    # a completion given as text is the assistant's reply
    texts = [pair.chosen[0]["content"] for pair in pairs]
    assert scorer(prompts=prompts[:6], completions=texts) == pytest.approx(scores[:6], abs=1e-6)


def test_the_reward_registry_weights_it_like_any_reward(trained):
    _, path = trained
    table = RewardScorer([(f"reward_model:{path}", 2.0), ("sharp_5tokens_completions", 1.0)])
    prompts = [[{"role": "user", "content": "What is 2 + 3?"}]] * 2
    completions = [[{"role": "assistant", "content": "5"}], [{"role": "assistant", "content": "7"}]]
    scores = table.score(prompts, completions, {})
    assert scores.shape == (2, 2) and torch.isfinite(scores).all()
    assert scores[:, 0].tolist() == pytest.approx(load_reward_model(path)(prompts, completions), abs=1e-6)


def test_a_grpo_run_trains_on_the_reward_model(trained, tmp_path):
    _, path = trained
    name = f"reward_model:{path}"
    raw = grpo_raw(tmp_path, rewards=[{"name": name}])
    trainer = GRPORecipe(validate(raw)).run()
    assert trainer.global_step == 3
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    values = [row[f"train/rewards/{name}/mean"] for row in rows if f"train/rewards/{name}/mean" in row]
    assert len(values) == 3 and all(value == value for value in values)  # scored every step, never NaN


def test_a_path_that_holds_no_reward_model_is_refused_in_one_line(trained, tmp_path):
    with pytest.raises(ConfigError) as info:
        resolve_reward(f"reward_model:{tmp_path / 'missing'}", key="grpo.rewards[0].name")
    message = str(info.value)
    assert message.startswith("grpo.rewards[0].name: ") and "missing does not exist" in message and "\n" not in message
    with pytest.raises(ConfigError, match="names no reward model"):
        resolve_reward("reward_model:")
    config = LlamaConfig(
        vocab_size=300, hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=1, num_labels=2
    )
    AutoModelForSequenceClassification.from_config(config).save_pretrained(tmp_path / "two")
    AutoTokenizer.from_pretrained(trained[1]).save_pretrained(tmp_path / "two")
    with pytest.raises(ConfigError, match="with 2 labels; a reward model has 1"):
        resolve_reward(f"reward_model:{tmp_path / 'two'}")


@pytest.mark.slow  # two runs of the script's own model size, and 100 greedy answers before and after
def test_the_example_script_runs_sft_then_grpo_on_the_reward_model(trained, tmp_path, monkeypatch):
    monkeypatch.setenv("HONING_CACHE_DIR", str(tmp_path / "cache"))
    script = Path(__file__).resolve().parents[2] / "examples" / "reward_grpo.py"
    spec = importlib.util.spec_from_file_location("reward_grpo", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(
        module, "MODEL", {**module.MODEL, "hidden_size": 32, "num_hidden_layers": 1, "intermediate_size": 64}
    )
    tiny = ["--sft-steps", "2", "--grpo-steps", "2", "--samples", "128", "--threads", "1"]
    found = module.main(["--reward", trained[1], "--base", "", "--folder", str(tmp_path), *tiny])
    assert set(found) == {"reward_first", "reward_last", "exact_match_before", "exact_match_after"}
    assert all(math.isfinite(value) for value in found.values())
    assert (tmp_path / "grpo" / "hf" / "config.json").exists()
