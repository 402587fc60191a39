"""The distillation recipe: 3 steps with LoRA on the student against a saved teacher (on- and off-policy steps),
a teacher equal to the student gives zero loss, exact resume, and a teacher of another tokenizer refused in one
line naming both models."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from honing.config import ConfigError, validate
from honing.data.chat.chat_tokenizer import chat_tokenizer
from honing.methods.distill import DistillTrainModule
from honing.recipes.distill import DistillRecipe
from tests.helpers import TINY_LLAMA_CONFIG

TINY = TINY_LLAMA_CONFIG


def raw_config(tmp_path, name="run", *, steps=3, teacher=None, **sections):
    """A tiny distillation run on generated letter reversal: LoRA on the student, evaluation every 2 steps."""
    raw = {
        "method": "distill",
        "trainer": {"save_folder": str(tmp_path / name), "max_duration": f"{steps}steps", "num_threads": 1},
        "data": {
            "train": {"sources": [{"path": "generated:reverse?samples=32&seed=0"}]},
            "validation": {"sources": [{"path": "generated:reverse?samples=4&seed=1"}]},
            "chat_template": "chatml",
            "seq_len": 64,
            "global_batch_size": 4,
            "micro_batch_size": 2,
            "cache_dir": str(tmp_path / "cache"),
        },
        "model": {"config": TINY, "lora": {"rank": 4, "alpha": 8}},
        "optim": {"lr": 1e-2},
        "distill": {"teacher_model_name_or_path": teacher, "lmbda": 0.5, "max_new_tokens": 8},
        "callbacks": {
            "checkpointer": {"save_interval": 2, "keep_last": 1},
            "evaluator": {"interval": 2, "metric_for_best_model": "eval/loss"},
            "sample": {"enabled": False},
            "console": {"enabled": False},
        },
    }
    for section, values in sections.items():
        raw[section] = {**raw[section], **values} if isinstance(values, dict) else values
    return raw


def save_teacher(tmp_path, folder="teacher", *, extra_token=None):
    """A tiny teacher saved with the run's chat tokenizer (one more token: another tokenizer)."""
    config = validate(raw_config(tmp_path))
    tokenizer, _ = chat_tokenizer(config.tokenizer, config.data, config.model)
    if extra_token:
        tokenizer.add_tokens([extra_token])
    torch.manual_seed(7)
    model = LlamaForCausalLM(
        LlamaConfig(
            **{k: v for k, v in TINY.items() if k != "model_type"},
            vocab_size=len(tokenizer),
            hidden_act="silu",
            pad_token_id=tokenizer.pad_token_id,
        )
    )
    path = tmp_path / folder
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def metrics(folder):
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def test_three_steps_with_lora_on_and_off_policy(tmp_path):
    teacher = save_teacher(tmp_path)
    raw = raw_config(tmp_path, teacher=teacher, distill={"teacher_model_name_or_path": teacher, "lmbda": 0.5})
    recipe = DistillRecipe(validate(raw))
    assert recipe.run().global_step == 3
    module = recipe.train_module
    assert isinstance(module, DistillTrainModule)
    sources = [module.completion_source(step) for step in (1, 2, 3)]
    assert set(sources) == {"student", "dataset"}  # seed 0 draws both kinds in three steps
    rows = [row for row in metrics(tmp_path / "run") if "train/loss" in row]
    assert [row["train/on_policy"] for row in rows] == [float(s == "student") for s in sources]
    assert all(row["train/loss"] > 0 for row in rows)
    last = metrics(tmp_path / "run")[-1]
    assert {"eval/loss", "eval/forward_kl", "eval/teacher_agreement"} <= set(last)
    assert (tmp_path / "run" / "adapter" / "adapter_config.json").exists()  # LoRA on the student
    saved = LlamaForCausalLM.from_pretrained(teacher).state_dict()
    held = module.teacher.state_dict()
    assert all(torch.equal(saved[name], held[name].cpu()) for name in saved)  # the teacher stayed frozen
    assert not any(p.requires_grad for p in module.teacher.parameters())


def test_a_teacher_equal_to_the_student_gives_zero_loss_on_the_same_tokens(tmp_path):
    raw = raw_config(tmp_path, steps=1, distill={"lmbda": 1.0, "beta": 0.5, "max_new_tokens": 8})
    recipe = DistillRecipe(validate(raw))  # no teacher named: a frozen copy of the student as built
    recipe.run()
    first = [row for row in metrics(tmp_path / "run") if "train/loss" in row][0]
    assert first["train/on_policy"] == 1.0
    assert first["train/loss"] == pytest.approx(0.0, abs=1e-7)  # scored on the same sampled tokens


def test_a_stopped_run_resumes_to_the_same_weights(tmp_path):
    teacher = save_teacher(tmp_path)
    section = {"teacher_model_name_or_path": teacher, "lmbda": 0.5, "beta": 0.3, "max_new_tokens": 8}
    straight = DistillRecipe(validate(raw_config(tmp_path, "straight", steps=4, distill=section)))
    straight.run()
    stopped = raw_config(tmp_path, "resumed", steps=4, distill=section, trainer={"hard_stop": "3steps"})
    assert DistillRecipe(validate(stopped)).run().global_step == 3
    resumed = DistillRecipe(validate(raw_config(tmp_path, "resumed", steps=4, distill=section)))
    assert resumed.run().global_step == 4
    left, right = straight.model.state_dict(), resumed.model.state_dict()
    assert sorted(left) == sorted(right) and all(torch.equal(left[name], right[name]) for name in left)
    losses = [[row["train/loss"] for row in metrics(tmp_path / name) if "train/loss" in row] for name in ("straight",)]
    assert len(losses[0]) == 4


def test_a_teacher_of_another_tokenizer_is_refused_in_one_line(tmp_path):
    teacher = save_teacher(tmp_path, "other", extra_token="<|tool|>")
    recipe = DistillRecipe(validate(raw_config(tmp_path, distill={"teacher_model_name_or_path": teacher})))
    with pytest.raises(ConfigError) as error:
        recipe.run()
    message = str(error.value)
    assert "\n" not in message
    assert teacher in message and "(built from model.config)" in message and "GOLD" in message
    assert "<|tool|>" in message
