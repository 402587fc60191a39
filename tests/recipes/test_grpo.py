"""GRPO runs end to end: TRL-named metrics, samples, LoRA with adapters off as the reference, exact resume after
kill -9 (the same completions are generated again), and a reward that raises."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time

import pytest
import torch
import yaml

from honing.config import validate
from honing.errors import DataError
from honing.recipes.grpo import GRPORecipe
from tests.e2e.test_cli import final_weights, honing
from tests.helpers import TINY_LLAMA_CONFIG


def grpo_raw(tmp_path, **grpo):
    return {
        "method": "grpo",
        "trainer": {
            "save_folder": str(tmp_path / "run"),
            "max_duration": "3steps",
            "num_threads": 1,
            "metrics_collect_interval": 1,
        },
        "data": {
            "train": {"sources": [{"path": "generated:reverse?samples=32&seed=0"}]},
            "chat_template": "chatml",
            "seq_len": 64,
            "global_batch_size": 2,
            "micro_batch_size": 1,
            "cache_dir": str(tmp_path / "cache"),
        },
        "model": {"config": {**TINY_LLAMA_CONFIG, "attention_dropout": 0.1}},
        "optim": {"lr": 1e-2},
        "grpo": {
            "num_generations": 4,
            "max_completion_length": 12,
            "rewards": [{"name": "sharp_5tokens_completions"}],
            "sample_interval": 1,
            **grpo,
        },
        "callbacks": {"sample": {"enabled": False}, "console": {"enabled": False}},
    }


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_lora_run_records_trl_metrics_and_samples(tmp_path):
    raw = grpo_raw(tmp_path, beta=0.1, num_iterations=2)
    raw["model"]["lora"] = {"rank": 4, "alpha": 8}
    recipe = GRPORecipe(validate(raw))
    recipe.run()
    assert recipe.reference_model is None  # the adapters are switched off for the reference
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [row["step"] for row in rows] == [1, 2, 3]
    for key in (
        "train/loss",
        "train/reward",
        "train/reward_std",
        "train/rewards/sharp_5tokens_completions/mean",
        "train/rewards/sharp_5tokens_completions/std",
        "train/frac_reward_zero_std",
        "train/kl",
        "train/completions/mean_length",
        "train/completions/min_length",
        "train/completions/max_length",
        "train/completions/clipped_ratio",
        "train/clip_ratio/region_mean",
        "optim/grad_norm",
    ):
        assert key in rows[-1], key
    assert rows[-1]["train/kl"] > 0.0  # two passes per rollout batch: the second is off the reference
    samples = read_jsonl(tmp_path / "run" / "samples.jsonl")
    assert len(samples) == 3 * 2 * 4  # every step's completions
    first = samples[0]
    assert set(first) == {"step", "prompt", "text", "reward", "sharp_5tokens_completions", "advantage"}
    assert first["reward"] == -abs(len(first["text"].split()) - 5) or first["text"].strip() == ""
    # tokens: every completion's prompt plus what it generated
    assert rows[-1]["throughput/total_tokens"] > 3 * 8 * 12 / 2


def test_a_raising_reward_stops_the_run_naming_it_and_the_prompt(tmp_path, monkeypatch):
    (tmp_path / "failing_rewards.py").write_text(
        "def fails(prompts, completions, **columns):\n    raise KeyError('target')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    raw = grpo_raw(tmp_path, rewards=[{"name": "failing_rewards:fails"}])
    with pytest.raises(DataError) as info:
        GRPORecipe(validate(raw)).run()
    message = str(info.value)
    assert "reward 'failing_rewards:fails' raised KeyError" in message
    assert "Reverse the letters:" in message  # the prompt


@pytest.mark.slow
def test_kill_9_then_rerun_generates_the_same_completions(tmp_path):
    def write(name):
        raw = grpo_raw(tmp_path / name, beta=0.05)
        raw["trainer"].update(max_duration="24steps", save_folder=str(tmp_path / name / "run"))
        raw["callbacks"]["checkpointer"] = {"save_interval": 4}
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(raw))
        return str(path), tmp_path / name / "run"

    config, reference = write("reference")
    result = honing("train", config)
    assert result.returncode == 0, result.stderr

    config, save_folder = write("killed")
    process = subprocess.Popen(
        [sys.executable, "-m", "honing", "train", config], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 120
    while not (save_folder / "step4").exists() and time.time() < deadline and process.poll() is None:
        time.sleep(0.02)
    # a random moment soon after the first checkpoint, possibly mid-step or mid-save: the run's whole duration
    # includes starting Python and building the model, so a fraction of it could outlast the 20 steps left
    time.sleep(random.uniform(0.0, 0.3))
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (save_folder / "hf").exists(), "the run finished before it was killed; the test proves nothing"

    result = honing("train", config)
    assert result.returncode == 0, result.stderr
    expected, actual = final_weights(reference), final_weights(save_folder)
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name

    # the resumed run re-generates the steps after its checkpoint: the last completions logged for each step
    # are those of the run that never stopped
    def by_step(path):
        steps = {}
        for row in read_jsonl(path / "samples.jsonl"):
            steps.setdefault(row["step"], []).append(row)
        return {step: [(r["text"], r["reward"]) for r in rows[-8:]] for step, rows in steps.items()}

    assert by_step(save_folder) == by_step(reference)


def test_held_out_prompts_are_answered_before_and_after_training(tmp_path):
    raw = grpo_raw(tmp_path)
    raw["data"]["validation"] = {"sources": [{"path": "generated:reverse?samples=3&seed=1&letters=4-4"}]}
    raw["callbacks"]["generation_eval"] = {"enabled": True, "num_prompts": 3, "max_new_tokens": 4}
    recipe = GRPORecipe(validate(raw))
    held_out = recipe.held_out_answers(recipe.model_assets())
    assert [messages[-1]["content"][::-1][:4] for messages, _ in held_out] == [answer for _, answer in held_out]
    recipe.run()
    answers = read_jsonl(tmp_path / "run" / "generation_eval.jsonl")
    assert [row["step"] for row in answers] == [0, 0, 0, 3, 3, 3]
    assert [row["expected"] for row in answers[:3]] == [answer for _, answer in held_out]
    logged = [row for row in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "eval/exact_match" in row]
    assert [row["step"] for row in logged] == [0, 3]
    assert all(0.0 <= row["eval/cer"] for row in logged)  # how far the near misses are


def test_the_generation_eval_needs_validation_prompts_with_answers(tmp_path):
    raw = grpo_raw(tmp_path)
    plain = tmp_path / "plain.jsonl"
    plain.write_text('{"prompt": "2 + 2 = "}\n')
    raw["data"]["validation"] = {"sources": [{"path": str(plain)}]}
    raw["callbacks"]["generation_eval"] = {"enabled": True}
    with pytest.raises(DataError, match="data.validation: 1 of 1 prompts cannot be checked"):
        recipe = GRPORecipe(validate(raw))
        recipe.held_out_answers(recipe.model_assets())
