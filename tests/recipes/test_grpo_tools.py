"""GRPO with tools end to end: a tiny random model whose first turn is made a calculator call (the test rewrites the
sampled tokens, as a policy fine-tuned on tool conversations would write them; later turns are the model's own). The
TRL tool metrics, the transcript in the samples and the validation pass, LoRA, an exact resume, and the keys and
combinations refused in one line."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from honing.config import validate
from honing.errors import ConfigError
from honing.methods.grpo_rollouts import GroupSampler
from honing.recipes.grpo import GRPORecipe
from tests.recipes.test_grpo import grpo_raw, read_jsonl

CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "%d * 7"}}</tool_call>'


def tools_raw(tmp_path, steps=3, **grpo):
    raw = grpo_raw(
        tmp_path,
        tools=["calculator"],
        max_turns=3,
        max_completion_length=160,
        rewards=[{"name": "exact_answer"}],
        **grpo,
    )
    rows = [{"prompt": [{"role": "user", "content": f"{n} * 7?"}], "answer": str(7 * n)} for n in range(12)]
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    raw["data"]["train"]["sources"] = [{"path": str(tmp_path / "prompts.jsonl")}]
    raw["data"]["validation"] = {"sources": [{"path": str(tmp_path / "prompts.jsonl"), "max_samples": 4}]}
    raw["data"]["seq_len"] = 640
    raw["trainer"]["max_duration"] = f"{steps}steps"
    raw["callbacks"]["evaluator"] = {"interval": 2}
    return raw


@pytest.fixture
def first_turn_calls(monkeypatch):
    """Every conversation's first turn becomes a calculator call on the prompt's number (sampled as usual, so every
    rank and step samples as it would, then rewritten)."""
    sample = GroupSampler.sample

    def scripted(self, batch, prompt_ids, prompt_mask, seeds, **sampling):
        ids, mask = sample(self, batch, prompt_ids, prompt_mask, seeds, **sampling)
        end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        for row in range(len(ids)):
            context = self.tokenizer.decode(prompt_ids[row][prompt_mask[row].bool()])
            if "<|im_start|>tool" in context:
                continue  # a later turn: the model's own
            number = int(context.rsplit("user\n", 1)[1].split(" ")[0])
            call = self.tokenizer(CALL % number, add_special_tokens=False)["input_ids"] + [end]
            ids[row], mask[row] = self.pad_token_id, 0
            if ids.shape[1] < len(call):
                extra = len(call) - ids.shape[1]
                ids = torch.nn.functional.pad(ids, (0, extra), value=self.pad_token_id)
                mask = torch.nn.functional.pad(mask, (0, extra))
            ids[row, : len(call)], mask[row, : len(call)] = torch.tensor(call), 1
        return ids, mask

    monkeypatch.setattr(GroupSampler, "sample", scripted)


def test_a_run_with_tools_logs_trls_tool_metrics_and_the_transcripts(tmp_path, first_turn_calls):
    raw = tools_raw(tmp_path)
    raw["grpo"]["validation"] = {"before_training": True}
    recipe = GRPORecipe(validate(raw))
    recipe.run()
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    train = [row for row in rows if "train/loss" in row]
    assert [row["step"] for row in train] == [1, 2, 3]
    for row in train:
        assert row["train/tools/call_frequency"] == 1.0  # one call per completion
        assert row["train/tools/failure_frequency"] == 0.0
        assert torch.isfinite(torch.tensor(row["train/loss"]))
    evals = [row for row in rows if "eval/reward" in row]
    assert [row["step"] for row in evals] == [0, 2, 3]
    assert all(row["eval/tools/call_frequency"] == 1.0 for row in evals)
    samples = read_jsonl(tmp_path / "run" / "samples.jsonl")
    first = samples[0]
    number = int(json.loads(first["prompt"])[0]["content"].split(" ")[0])
    assert first["text"].startswith(CALL % number + f"\n[tool calculator] {7 * number}\n")
    # the policy's tokens only are counted (the tool turn is not), as TRL counts them
    assert all(row["train/completions/mean_length"] < 160 for row in train)


def test_lora_with_tools_trains_its_adapters(tmp_path, first_turn_calls):
    raw = tools_raw(tmp_path, steps=2, beta=0.1)
    raw["model"]["lora"] = {"rank": 4, "alpha": 8}
    GRPORecipe(validate(raw)).run()
    rows = [row for row in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "train/loss" in row]
    assert [row["train/tools/call_frequency"] for row in rows] == [1.0, 1.0]
    assert all("train/kl" in row for row in rows)


def test_rloo_samples_the_same_conversations_with_its_own_section(tmp_path, first_turn_calls):
    raw = tools_raw(tmp_path, steps=2)
    raw["method"], raw["rloo"] = "rloo", raw.pop("grpo")
    GRPORecipe(validate(raw)).run()
    rows = [row for row in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "train/loss" in row]
    assert [row["train/tools/call_frequency"] for row in rows] == [1.0, 1.0]
    raw["rloo"]["tools"] = ["calculater"]
    with pytest.raises(ConfigError, match=r"rloo.tools\[0\]: unknown tool 'calculater'"):
        GRPORecipe(validate(raw)).build()


def test_a_resumed_run_samples_the_same_conversations(tmp_path, first_turn_calls):
    straight = tools_raw(tmp_path / "a", steps=4)
    GRPORecipe(validate(straight)).run()
    stopped = tools_raw(tmp_path / "b", steps=4)
    stopped["trainer"]["hard_stop"] = "2steps"
    stopped["callbacks"]["checkpointer"] = {"save_interval": 2}
    GRPORecipe(validate(stopped)).run()
    del stopped["trainer"]["hard_stop"]
    GRPORecipe(validate(stopped)).run()
    a = {row["step"]: row for row in read_jsonl(tmp_path / "a" / "run" / "metrics.jsonl") if "train/loss" in row}
    b = {row["step"]: row for row in read_jsonl(tmp_path / "b" / "run" / "metrics.jsonl") if "train/loss" in row}
    for key in ("train/loss", "train/reward", "train/completions/mean_length", "train/tools/call_frequency"):
        assert a[4][key] == b[4][key], key
    weights = [load_file(str(tmp_path / x / "run" / "hf" / "model.safetensors")) for x in "ab"]
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])


def test_tool_keys_without_tools_and_what_tools_cannot_run_with_are_refused(tmp_path):
    raw = grpo_raw(tmp_path, max_turns=2)
    with pytest.raises(ConfigError, match="grpo: max_turns apply to tool calls only; set tools"):
        validate(raw)
    raw = tools_raw(tmp_path)
    raw["callbacks"]["generation_eval"] = {"enabled": True}
    with pytest.raises(ConfigError, match="callbacks.generation_eval answers in one turn"):
        GRPORecipe(validate(raw))
    raw = tools_raw(tmp_path)
    raw["data"]["chat_template"] = "llama3"  # honing's Llama 3 template shows no tools
    with pytest.raises(ConfigError, match="the chat template does not show tools to the model"):
        GRPORecipe(validate(raw)).build()
    raw = tools_raw(tmp_path)
    raw["grpo"]["tools"] = ["no_such_tool"]
    with pytest.raises(ConfigError, match=r"grpo.tools\[0\]: unknown tool 'no_such_tool'"):
        GRPORecipe(validate(raw)).build()
