"""GRPO's validation pass: held-out prompts answered at each evaluation and scored by the run's rewards
(``eval/reward``, ``eval/rewards/<name>/mean``), without moving training; and ``grpo.use_vllm`` where vLLM cannot
sample (one info line, the run goes on)."""

from __future__ import annotations

import logging
import math

import pytest
import torch
import yaml

from honing.config import validate
from honing.errors import DataError
from honing.models import unwrap_model
from honing.recipes.grpo import GRPORecipe
from honing.rl.rewards import REWARDS
from tests.distributed.runs import failure_excerpt, honing_train
from tests.e2e.test_cli import final_weights
from tests.recipes.test_grpo import grpo_raw, read_jsonl

HELD_OUT = "generated:reverse?samples=3&seed=1&letters=4-4"
REWARD = "sharp_5tokens_completions"
CHARACTERS = "tests.recipes.test_grpo_validation:characters"


def characters(prompts, completions, **columns):
    """A reward that differs from prompt to prompt (a tiny model's greedy completions may not): the completion's
    length in characters plus the code of the prompt's last character."""
    return [float(len(c[0]["content"]) + ord(p[-1]["content"][-1])) for p, c in zip(prompts, completions)]


def validated_raw(tmp_path, **grpo):
    raw = grpo_raw(tmp_path, **grpo)
    raw["data"]["validation"] = {"sources": [{"path": HELD_OUT}]}
    # one prompt per batch: the direct scoring below generates each prompt alone, without padding
    raw["callbacks"]["evaluator"] = {"interval": 2, "batch_size": 1}
    return raw


def greedy_completions(recipe):
    """Each held-out prompt answered greedily by the run's model through transformers' own ``generate``."""
    model, tokenizer = unwrap_model(recipe.model).eval(), recipe.tokenizer
    stop = recipe.train_module.sampler.stop_token_ids
    texts = []
    for batch in recipe.eval_batches:
        with torch.no_grad():
            out = model.generate(
                input_ids=batch["input_ids"],
                attention_mask=batch["attention_mask"],
                max_new_tokens=recipe.grpo.max_completion_length,
                do_sample=False,
                eos_token_id=stop,
                pad_token_id=tokenizer.pad_token_id,
            )
        new = out[0, batch["input_ids"].shape[1] :].tolist()
        cut = next((i + 1 for i, token in enumerate(new) if token in stop), len(new))
        texts.append((batch["prompt"][0], tokenizer.decode(new[:cut], skip_special_tokens=True)))
    return texts


def test_held_out_rewards_are_logged_at_eval_steps_and_equal_a_direct_scoring(tmp_path):
    raw = validated_raw(tmp_path, rewards=[{"name": REWARD}, {"name": CHARACTERS, "weight": 0.5}])
    raw["grpo"]["validation"] = {"before_training": True}  # verl's val_before_train
    recipe = GRPORecipe(validate(raw))
    recipe.run()
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    logged = [row for row in rows if "eval/reward" in row]
    assert [row["step"] for row in logged] == [0, 2, 3]  # before, every callbacks.evaluator.interval steps, the end
    for key in (
        "eval/reward",
        "eval/reward_std",
        f"eval/rewards/{REWARD}/mean",
        "eval/completions/mean_length",
        "eval/completions/clipped_ratio",
    ):
        assert key in logged[-1], key
    answered = greedy_completions(recipe)  # the model as it was at the last evaluation (step 3)
    assert len(answered) == 3
    completions = [[{"role": "assistant", "content": text}] for _, text in answered]
    sharp = REWARDS[REWARD]([prompt for prompt, _ in answered], completions)
    lengths = characters([prompt for prompt, _ in answered], completions)
    assert len(set(lengths)) > 1  # the rewards differ, so the means below check each one
    last = logged[-1]
    assert math.isclose(last[f"eval/rewards/{REWARD}/mean"], sum(sharp) / 3, abs_tol=1e-6)
    assert math.isclose(last[f"eval/rewards/{CHARACTERS}/mean"], sum(lengths) / 3, abs_tol=1e-6)
    combined = [a + 0.5 * b for a, b in zip(sharp, lengths)]
    assert math.isclose(last["eval/reward"], sum(combined) / 3, abs_tol=1e-5)
    mean = sum(combined) / 3
    std = math.sqrt(sum((value - mean) ** 2 for value in combined) / 2)
    assert math.isclose(last["eval/reward_std"], std, abs_tol=1e-5)


def test_training_is_the_same_with_and_without_the_validation_pass(tmp_path):
    GRPORecipe(validate(grpo_raw(tmp_path / "plain"))).run()  # without data.validation, nothing is evaluated
    sampled = {"num_generations": 2, "temperature": 1.0, "before_training": True}
    raw = validated_raw(tmp_path / "validated", validation=sampled)
    GRPORecipe(validate(raw)).run()
    plain = read_jsonl(tmp_path / "plain" / "run" / "metrics.jsonl")
    validated = read_jsonl(tmp_path / "validated" / "run" / "metrics.jsonl")
    trained = [row for row in validated if "train/loss" in row]  # step 0 holds the evaluation before training
    assert [row["train/loss"] for row in plain] == [row["train/loss"] for row in trained]
    assert [row["train/reward"] for row in plain] == [row["train/reward"] for row in trained]
    assert [row["step"] for row in validated if "eval/reward" in row] == [0, 2, 3]
    assert not any("eval/reward" in row for row in plain)
    ours, theirs = final_weights(tmp_path / "plain" / "run"), final_weights(tmp_path / "validated" / "run")
    assert all(torch.equal(ours[name], theirs[name]) for name in ours)


def test_named_validation_sources_get_their_own_rewards(tmp_path):
    raw = validated_raw(tmp_path)
    raw["trainer"]["max_duration"] = "1steps"
    raw["data"]["validation"] = {
        "sources": [{"path": HELD_OUT, "name": "four"}, {"path": "generated:reverse?samples=2&seed=2", "name": "any"}]
    }
    GRPORecipe(validate(raw)).run()
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [row["step"] for row in rows if "eval/reward" in row] == [1]  # by default nothing before training
    last = rows[-1]
    for name in ("four", "any"):
        assert f"eval/{name}/reward" in last and f"eval/{name}/rewards/{REWARD}/mean" in last
    # the whole split's mean weighs each source by its completions (3 and 2)
    whole = (3 * last["eval/four/reward"] + 2 * last["eval/any/reward"]) / 5
    assert math.isclose(last["eval/reward"], whole, abs_tol=1e-9)


def test_held_out_rows_the_rewards_cannot_score_fail_before_training(tmp_path):
    prompts = tmp_path / "countdown.jsonl"
    prompts.write_text('{"prompt": "3 5 make 8: ", "nums": [3, 5], "target": 8}\n' * 4)
    raw = validated_raw(tmp_path, rewards=[{"name": "countdown"}])
    raw["data"]["train"] = {"sources": [{"path": str(prompts)}]}  # the held-out reversals have no target, nums
    with pytest.raises(DataError, match=r"data.validation: the held-out prompts cannot be scored .*'countdown'"):
        GRPORecipe(validate(raw)).run()
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_use_vllm_where_vllm_cannot_sample_says_so_once_and_trains(tmp_path, caplog):
    raw = grpo_raw(tmp_path, use_vllm=True)
    raw["trainer"]["max_duration"] = "1steps"
    with caplog.at_level(logging.INFO, logger="honing.recipes.grpo_validation"):
        GRPORecipe(validate(raw)).run()
    lines = [record.getMessage() for record in caplog.records if "grpo.use_vllm" in record.getMessage()]
    assert len(lines) == 1 and "honing's own decoder samples the completions" in lines[0]
    assert "CUDA" in lines[0] or "vllm" in lines[0]
    assert [row["step"] for row in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == [1]


@pytest.mark.slow
def test_two_fsdp_processes_score_each_held_out_prompt_once(tmp_path):
    """3 held-out prompts, one per batch, over 2 ranks: the second rank's filler batch takes part in every FSDP2
    forward but scores nothing, so the means are those of one process."""
    metrics = {}
    for processes in (1, 2):
        raw = validated_raw(tmp_path / str(processes), rewards=[{"name": CHARACTERS}])
        raw["trainer"]["max_duration"] = "1steps"
        raw["optim"]["lr"] = 1e-9  # the same model in both runs, whatever the processes' numerics
        path = tmp_path / f"{processes}.yaml"
        path.write_text(yaml.safe_dump(raw))
        result = honing_train(str(path), nproc=processes if processes > 1 else None, timeout=300)
        assert result.returncode == 0, failure_excerpt(result.stderr)
        metrics[processes] = read_jsonl(tmp_path / str(processes) / "run" / "metrics.jsonl")[-1]
    for key in ("eval/reward", f"eval/rewards/{CHARACTERS}/mean", "eval/completions/mean_length"):
        assert math.isclose(metrics[2][key], metrics[1][key], abs_tol=1e-6), key
