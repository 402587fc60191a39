"""GRPO on a trained reward model: the policy's only reward is ``reward_model:PATH``, the export of
``configs/reward.yaml`` (the right sum of two digits preferred over one off by 1 to 3).

The starting policy is the SimPO example's model fine-tuned (SFT, 40 steps) here on the same questions answered
rightly one time in three and one too high otherwise, so that most of its samples are wrong. GRPO then samples 8
answers per question, scores each with the reward model alone (no verifiable reward), and trains on the
group-relative advantages. Printed: the mean reward of the first and last tenth of the steps, and the greedy exact
match on 100 held-out questions before and after GRPO (measured: docs/methods/reward.md).

    .venv/bin/honing train configs/simpo.yaml         # first: runs/simpo/hf, the base of both models
    .venv/bin/honing train configs/reward.yaml        # then: runs/reward/hf
    .venv/bin/python examples/reward_grpo.py          # writes runs/reward_grpo/{sft,grpo}
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from honing.config import validate
from honing.recipes import recipe_for

MODEL = {
    "model_type": "llama",
    "hidden_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "intermediate_size": 512,
}


def questions(count: int, seed: int) -> list[tuple[str, int]]:
    """``count`` questions "What is a + b?" on digits, with their sums."""
    rng = random.Random(f"reward_grpo:{seed}")
    pairs = [(rng.randint(0, 9), rng.randint(0, 9)) for _ in range(count)]
    return [(f"What is {a} + {b}?", a + b) for a, b in pairs]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> str:
    """``rows`` as a JSONL file at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def weak_answers(path: Path, count: int, seed: int) -> str:
    """SFT conversations whose answer is the right sum one time in three and one too high otherwise."""
    rng = random.Random(f"weak:{seed}")
    rows = []
    for question, total in questions(count, seed):
        answer = total if rng.random() < 1 / 3 else total + 1
        rows.append(
            {"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": str(answer)}]}
        )
    return write_jsonl(path, rows)


def prompts(path: Path, count: int, seed: int) -> str:
    """GRPO prompts (TRL's prompt rows) with their right sum as ``answer`` (the generation eval's expected answer)."""
    rows = [{"prompt": [{"role": "user", "content": q}], "answer": str(total)} for q, total in questions(count, seed)]
    return write_jsonl(path, rows)


def sft_config(folder: Path, data: str, base: str | None, steps: int, threads: int | None) -> dict[str, Any]:
    """The starting policy: SFT of ``base`` (None: a small model built from ``MODEL``) on the weak answers."""
    return {
        "method": "sft",
        "trainer": {"save_folder": str(folder), "max_duration": f"{steps}steps", "seed": 0, "num_threads": threads},
        "data": {
            "train": {"sources": [{"path": data}]},
            "chat_template": "chatml",
            "seq_len": 64,
            "global_batch_size": 64,
        },
        "model": {"name_or_path": base} if base else {"config": dict(MODEL)},
        "optim": {"lr": 5e-4},
        "scheduler": {"name": "cosine", "warmup_steps": min(20, steps // 5)},
        "callbacks": {"checkpointer": {"save_interval": max(steps, 1), "keep_last": 1}, "sample": {"enabled": False}},
    }


def grpo_config(folder: Path, policy: str, reward: str, train: str, held_out: str, steps: int, threads: int | None):
    """GRPO of ``policy`` with the reward model at ``reward`` as its only reward; greedy exact match on held-out
    questions before and after."""
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
            "seq_len": 64,
            "global_batch_size": 8,
        },
        "model": {"name_or_path": policy},
        "optim": {"lr": 2e-4},
        "scheduler": {"name": "constant"},
        "grpo": {
            "num_generations": 8,
            "max_completion_length": 6,
            "temperature": 1.0,
            "beta": 0.0,
            "rewards": [{"name": f"reward_model:{reward}"}],
            "sample_interval": None,
        },
        "callbacks": {
            "checkpointer": {"save_interval": max(steps, 1), "keep_last": 1},
            "generation_eval": {"enabled": True, "num_prompts": 100, "max_new_tokens": 6},
            "sample": {"enabled": False},
        },
    }


def run(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """Train ``raw``; its metrics rows."""
    recipe_for(validate(raw)).run()
    lines = (Path(raw["trainer"]["save_folder"]) / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def main(argv: list[str] | None = None) -> dict[str, float]:
    """SFT the starting policy, GRPO it on the reward model; the mean rewards and exact matches measured."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reward", default="runs/reward/hf", help="the reward model (configs/reward.yaml's export)")
    parser.add_argument("--folder", default="runs/reward_grpo", help="where the SFT and GRPO runs are written")
    parser.add_argument(
        "--base", default="runs/simpo/hf", help="the model the policy is fine-tuned from; '' builds one"
    )
    parser.add_argument("--sft-steps", type=int, default=40)
    parser.add_argument("--grpo-steps", type=int, default=100)
    parser.add_argument("--samples", type=int, default=9600, help="SFT conversations and GRPO prompts")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    folder = Path(args.folder)
    sft_data = weak_answers(folder / "data" / "sft.jsonl", args.samples, seed=0)
    train = prompts(folder / "data" / "prompts.jsonl", args.samples, seed=1)
    held_out = prompts(folder / "data" / "held_out.jsonl", 100, seed=2)
    run(sft_config(folder / "sft", sft_data, args.base or None, args.sft_steps, args.threads))
    rows = run(
        grpo_config(
            folder / "grpo", str(folder / "sft" / "hf"), args.reward, train, held_out, args.grpo_steps, args.threads
        )
    )
    rewards = [row["train/reward"] for row in rows if "train/reward" in row]
    matches = [row["eval/exact_match"] for row in rows if "eval/exact_match" in row]
    window = max(1, len(rewards) // 10)
    found = {
        "reward_first": sum(rewards[:window]) / window,
        "reward_last": sum(rewards[-window:]) / window,
        "exact_match_before": matches[0] if matches else float("nan"),
        "exact_match_after": matches[-1] if matches else float("nan"),
    }
    print(
        f"mean reward: {found['reward_first']:.3f} (first {window} steps) -> {found['reward_last']:.3f} (last "
        f"{window}); held-out greedy exact match {found['exact_match_before']:.0%} -> {found['exact_match_after']:.0%}"
    )
    return found


if __name__ == "__main__":
    main()
