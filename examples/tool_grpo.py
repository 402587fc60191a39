"""Multi-turn GRPO with a tool: the policy learns to call a calculator for products of two 3-digit numbers, which a
small model cannot work out by heart, and to copy the tool's answer into its reply.

The starting policy is a small model fine-tuned (SFT, 900 steps: a model this small needs them to learn to copy the
operands into the call and the tool's answer into the reply) here on conversations in the format of honing's
``chatml`` template with ``tools``: half of them call ``calculator`` and copy its answer, the other half answer
directly (the right product, which the model cannot learn, so its direct answers are wrong). GRPO then samples 8
conversations per question (``grpo.tools: [calculator]``: the tool runs, its answer is a tool turn masked from the
loss), rewards an exact final answer, and trains. Printed: the held-out exact match (conversations sampled at
temperature 1 and scored, ``eval/reward``) and the tool calls per answer (``train/tools/call_frequency``, TRL's
name) at the start and end (measured: docs/methods/tools.md).

    .venv/bin/python examples/tool_grpo.py          # writes runs/tool_grpo/{data,sft,grpo}
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from honing.config import validate
from honing.recipes import recipe_for
from honing.rl.builtin_tools import calculator
from honing.rl.tools import tool_schema

MODEL = {
    "model_type": "llama",
    "hidden_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "intermediate_size": 512,
}
SEQ_LEN = 640


def questions(count: int, seed: int) -> list[tuple[str, str, str]]:
    """``count`` (question, expression, product) on two 3-digit numbers."""
    rng = random.Random(f"tool_grpo:{seed}")
    out = []
    for _ in range(count):
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        out.append((f"What is {a} * {b}?", f"{a} * {b}", str(a * b)))
    return out


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> str:
    """``rows`` as a JSONL file at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def sft_conversations(path: Path, count: int, seed: int, tool_share: float) -> str:
    """SFT rows (``messages`` + ``tools``): a ``tool_share`` of them call the calculator, the rest answer directly."""
    rng = random.Random(f"sft:{seed}")
    tools = [tool_schema(calculator, key="example")]
    rows = []
    for question, expression, product in questions(count, seed):
        messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
        if rng.random() < tool_share:
            call = {"type": "function", "function": {"name": "calculator", "arguments": {"expression": expression}}}
            messages += [
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "name": "calculator", "content": calculator(expression)},
            ]
        messages.append({"role": "assistant", "content": product})
        rows.append({"messages": messages, "tools": tools})
    return write_jsonl(path, rows)


def prompts(path: Path, count: int, seed: int) -> str:
    """GRPO prompts (TRL's prompt rows) with the product as ``answer`` (``exact_answer`` reads it)."""
    rows = [{"prompt": [{"role": "user", "content": q}], "answer": product} for q, _, product in questions(count, seed)]
    return write_jsonl(path, rows)


def sft_config(folder: Path, data: str, steps: int, threads: int | None) -> dict[str, Any]:
    """The starting policy: a small model trained from scratch on the SFT conversations."""
    return {
        "method": "sft",
        "trainer": {"save_folder": str(folder), "max_duration": f"{steps}steps", "seed": 0, "num_threads": threads},
        "data": {
            "train": {"sources": [{"path": data}]},
            "chat_template": "chatml",
            "seq_len": SEQ_LEN,
            "global_batch_size": 32,
        },
        "model": {"config": dict(MODEL)},
        "optim": {"lr": 2e-3},
        "scheduler": {"name": "cosine", "warmup_steps": min(20, steps // 5)},
        "callbacks": {"checkpointer": {"save_interval": max(steps, 1), "keep_last": 1}, "sample": {"enabled": False}},
    }


def grpo_config(folder: Path, policy: str, train: str, held_out: str, steps: int, threads: int | None):
    """GRPO of ``policy`` with the calculator and an exact-answer reward; the held-out questions sampled and scored
    before training and every ``steps // 4`` steps."""
    return {
        "method": "grpo",
        "trainer": {
            "save_folder": str(folder),
            "max_duration": f"{steps}steps",
            "seed": 0,
            "metrics_collect_interval": 1,
            "num_threads": threads,
        },
        "data": {
            "train": {"sources": [{"path": train}]},
            "validation": {"sources": [{"path": held_out}]},
            "chat_template": "chatml",
            "seq_len": SEQ_LEN,
            "global_batch_size": 8,
        },
        "model": {"name_or_path": policy},
        "optim": {"lr": 5e-5},
        "scheduler": {"name": "constant"},
        "grpo": {
            "num_generations": 8,
            "max_completion_length": 128,
            "temperature": 1.0,
            "rewards": [{"name": "exact_answer"}],
            "tools": ["calculator"],
            "max_turns": 2,
            "sample_interval": max(steps // 4, 1),
            "validation": {"temperature": 1.0, "num_generations": 2, "before_training": True},
        },
        "callbacks": {
            "checkpointer": {"save_interval": max(steps, 1), "keep_last": 1},
            "evaluator": {"interval": max(steps // 4, 1)},
            "sample": {"enabled": False},
        },
    }


def run(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """Train ``raw``; its metrics rows."""
    recipe_for(validate(raw)).run()
    lines = (Path(raw["trainer"]["save_folder"]) / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def main(argv: list[str] | None = None) -> dict[str, float]:
    """SFT the starting policy, GRPO it with the calculator; the exact matches and tool calls measured."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", default="runs/tool_grpo", help="where the data, SFT and GRPO runs are written")
    parser.add_argument("--sft-steps", type=int, default=900)
    parser.add_argument("--grpo-steps", type=int, default=60)
    parser.add_argument("--tool-share", type=float, default=0.5, help="SFT conversations that call the tool")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    folder = Path(args.folder)
    sft_data = sft_conversations(folder / "data" / "sft.jsonl", 32 * args.sft_steps, 0, args.tool_share)
    train = prompts(folder / "data" / "prompts.jsonl", 8 * args.grpo_steps, seed=1)
    held_out = prompts(folder / "data" / "held_out.jsonl", 64, seed=2)
    run(sft_config(folder / "sft", sft_data, args.sft_steps, args.threads))
    rows = run(grpo_config(folder / "grpo", str(folder / "sft" / "hf"), train, held_out, args.grpo_steps, args.threads))
    evals = [row for row in rows if "eval/reward" in row]
    calls = [row["train/tools/call_frequency"] for row in rows if "train/tools/call_frequency" in row]
    window = max(1, len(calls) // 10)
    found = {
        "exact_match_before": evals[0]["eval/reward"],
        "exact_match_after": evals[-1]["eval/reward"],
        "eval_calls_before": evals[0].get("eval/tools/call_frequency", float("nan")),
        "eval_calls_after": evals[-1].get("eval/tools/call_frequency", float("nan")),
        "train_calls_first": sum(calls[:window]) / window,
        "train_calls_last": sum(calls[-window:]) / window,
    }
    print(
        f"held-out exact match {found['exact_match_before']:.1%} -> {found['exact_match_after']:.1%}; tool calls "
        f"per answer (held-out) {found['eval_calls_before']:.2f} -> {found['eval_calls_after']:.2f}, (training, "
        f"first / last {window} steps) {found['train_calls_first']:.2f} -> {found['train_calls_last']:.2f}"
    )
    for row in evals:
        print(f"  step {row['step']:>4}: eval/reward {row['eval/reward']:.3f}")
    return found


if __name__ == "__main__":
    main()
