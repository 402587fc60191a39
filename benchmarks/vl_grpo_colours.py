"""VL GRPO learns a visual task: a tiny Qwen2-VL names the colour of a square (R, G, B or Y), and its reward on
held-out images rises over the run.

Two stages, both on the CPU with a model built from its config (random weights):

1. VL-SFT on the answer format only: the same prompt with a *grey* image and a random letter as the answer, so the
   model learns to answer with one of the four letters and stop, and nothing about colours (the image tells it
   nothing). Its held-out exact match is then what a guess gets.
2. VL GRPO from that model on coloured squares, rewarded 1 when the answer is the square's letter (``exact_answer``).
   Only the image tells the letter, so a held-out reward above the most frequent letter's share means the model
   reads the image. ``eval/reward`` is the greedy answers' mean reward on 16 held-out squares.

    .venv/bin/python benchmarks/vl_grpo_colours.py --folder runs/vl-grpo-colours
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import time
from pathlib import Path

from honing.config import validate
from honing.recipes.vl_grpo import VLGRPORecipe
from honing.recipes.vl_sft import VLSFTRecipe

COLOURS = {"R": (220, 30, 30), "G": (30, 180, 30), "B": (30, 30, 220), "Y": (230, 220, 30)}
PROMPT = "Colour? R, G, B or Y."
QUIET = {"sample": {"enabled": False}, "console": {"enabled": False}}


def write_squares(folder: Path, name: str, count: int, seed: int, *, grey: bool = False) -> Path:
    """``count`` conversations of a 56-pixel square (its colour jittered, or grey) and its letter."""
    from PIL import Image

    rng = random.Random(seed)
    (folder / name).mkdir(parents=True, exist_ok=True)
    rows = []
    for index in range(count):
        letter = rng.choice(list(COLOURS))
        colour = (128, 128, 128) if grey else tuple(max(0, min(255, c + rng.randint(-25, 25))) for c in COLOURS[letter])
        path = folder / name / f"{index}.png"
        Image.new("RGB", (56, 56), colour).save(path)
        user = [{"type": "text", "content": PROMPT}, {"type": "image_path", "content": str(path)}]
        rows.append({"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": letter}]})
    path = folder / f"{name}.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def trainer_section(folder: Path, steps: int) -> dict:
    return {"save_folder": str(folder), "max_duration": f"{steps}steps", "seed": 0, "metrics_collect_interval": 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", default="runs/vl-grpo-colours")
    parser.add_argument("--sft-steps", type=int, default=40)
    parser.add_argument("--grpo-steps", type=int, default=120)
    parser.add_argument("--lr", type=float, default=2e-3)
    args = parser.parse_args()
    root = Path(args.folder)
    train, held_out = write_squares(root, "train", 64, 0), write_squares(root, "held_out", 16, 1)
    grey = write_squares(root, "grey", 64, 2, grey=True)
    data = {"seq_len": 96, "cache_dir": str(root / "cache")}
    start = time.time()
    sft = {
        "method": "vl_sft",
        "trainer": trainer_section(root / "sft", args.sft_steps),
        "data": {"train": {"sources": [{"path": str(grey)}]}, "global_batch_size": 8, **data},
        "model": {"config": {"model_type": "qwen2_vl"}, "lora": None},
        "optim": {"lr": 1e-2},
        "callbacks": QUIET,
    }
    VLSFTRecipe(validate(sft)).run()
    print(f"format SFT on grey squares: {args.sft_steps} steps, {time.time() - start:.0f} s")
    start = time.time()
    grpo = {
        "method": "vl_grpo",
        "trainer": trainer_section(root / "grpo", args.grpo_steps),
        "data": {
            "train": {"sources": [{"path": str(train), "format": "conversation"}]},
            "validation": {"sources": [{"path": str(held_out), "format": "conversation"}]},
            "global_batch_size": 4,
            **data,
        },
        "model": {"name_or_path": str(root / "sft" / "hf"), "lora": None},
        "optim": {"lr": args.lr},
        "grpo": {
            "num_generations": 8,
            "max_completion_length": 3,
            "rewards": [{"name": "exact_answer"}],
            "validation": {"before_training": True, "temperature": 0.0},
        },
        "callbacks": {**QUIET, "evaluator": {"interval": max(1, args.grpo_steps // 6)}},
    }
    VLGRPORecipe(validate(grpo)).run()
    print(f"VL GRPO on coloured squares: {args.grpo_steps} steps, {time.time() - start:.0f} s")
    letters = collections.Counter(json.loads(line)["messages"][-1]["content"] for line in held_out.open())
    print(f"held-out: {sum(letters.values())} squares; one letter for all scores {max(letters.values()) / 16:.3f}")
    rows = [json.loads(line) for line in (root / "grpo" / "metrics.jsonl").open()]
    for row in rows:
        if "eval/reward" in row:
            print(f"step {row['step']:4d}  eval/reward {row['eval/reward']:.3f}")
    rewards = [row["train/reward"] for row in rows if "train/reward" in row]
    tenth = max(1, len(rewards) // 10)
    first, last = sum(rewards[:tenth]) / tenth, sum(rewards[-tenth:]) / tenth
    print(f"train/reward: mean of the first {tenth} steps {first:.3f}, of the last {tenth} {last:.3f}")


if __name__ == "__main__":
    main()
