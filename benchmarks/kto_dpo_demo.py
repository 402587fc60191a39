"""KTO on a real preference set turned unpaired: LLaMA-Factory's dpo_en_demo (``../shared/data/dpo_demo``, 300 pairs
of long English replies), each pair two KTO rows (chosen desirable, rejected undesirable). The pairs are split by a
seed into training and held-out pairs; the held-out preference accuracy is KTO's ``eval/rewards/accuracies``: the
share of held-out pairs whose chosen reply gets the higher reward β·(log π − log π_ref), as DPO's and SimPO's
examples measure theirs.

A small Llama-style model with byte-level tokens, from random weights or (``--sft-steps N``) from an SFT stage on the
training pairs' chosen conversations first, which is then KTO's reference::

    python benchmarks/kto_dpo_demo.py [--data ../shared/data/dpo_demo/dpo_en_demo.json] [--out benchmarks/out/kto]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from honing.config import validate  # noqa: E402
from honing.recipes.kto import KTORecipe  # noqa: E402
from honing.recipes.sft import SFTRecipe  # noqa: E402

MODEL = {  # CPU-sized: configs/kto.yaml's
    "model_type": "llama",
    "hidden_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "intermediate_size": 512,
}


def split_pairs(path: str, out: str, *, held_out: int, seed: int) -> tuple[str, str, str]:
    """The pairs of ``path`` in two JSONL files (training, held-out; rows unchanged) and the training pairs' chosen
    conversations for the SFT stage."""
    with open(path, encoding="utf-8") as handle:
        rows = json.load(handle)
    random.Random(seed).shuffle(rows)
    os.makedirs(out, exist_ok=True)
    paths = [os.path.join(out, name) for name in ("train.jsonl", "held_out.jsonl", "sft.jsonl")]
    roles = {"human": "user", "gpt": "assistant", "system": "system"}
    for target, part in zip(paths[:2], (rows[held_out:], rows[:held_out])):
        with open(target, "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(row) + "\n" for row in part)
    with open(paths[2], "w", encoding="utf-8") as handle:
        for row in rows[held_out:]:
            turns = [*row["conversations"], row["chosen"]]
            messages = [{"role": roles[turn["from"]], "content": turn["value"]} for turn in turns]
            handle.write(json.dumps({"messages": messages}) + "\n")
    return paths[0], paths[1], paths[2]


def common(out: str, name: str, steps: int, seq_len: int, batch: int) -> dict:
    """The sections both stages share."""
    return {
        "trainer": {"save_folder": os.path.join(out, name), "max_duration": f"{steps}steps", "seed": 0},
        "data": {"chat_template": "chatml", "seq_len": seq_len, "overlong": "truncate", "global_batch_size": batch},
        "scheduler": {"name": "cosine", "warmup_steps": max(steps // 20, 1)},
        "callbacks": {"sample": {"enabled": False}, "checkpointer": {"save_interval": 10_000}},
    }


def main() -> None:
    """Train (SFT, then) KTO and print the held-out preference accuracy at each evaluation."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", default=os.path.join(HERE, "..", "..", "shared", "data", "dpo_demo", "dpo_en_demo.json")
    )
    parser.add_argument("--out", default=os.path.join(HERE, "out", "kto_dpo_demo"))
    parser.add_argument("--held-out", type=int, default=60, help="pairs held out (of 300)")
    parser.add_argument("--sft-steps", type=int, default=0, help="an SFT stage first (0: KTO from random weights)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--beta", type=float, default=0.1)
    parser.add_argument("--seq-len", type=int, default=384)
    parser.add_argument("--batch", type=int, default=16, help="rows a step")
    parser.add_argument("--hidden", type=int, default=MODEL["hidden_size"], help="the model's width (4 heads)")
    args = parser.parse_args()
    train, held_out, sft = split_pairs(args.data, args.out, held_out=args.held_out, seed=0)
    shape = {"hidden_size": args.hidden, "intermediate_size": 4 * args.hidden}
    model: dict = {"config": {**MODEL, **shape}}
    if args.sft_steps:
        raw = common(args.out, "sft", args.sft_steps, args.seq_len, args.batch)
        raw.update(method="sft", model=model, optim={"lr": 1e-3})
        raw["data"]["train"] = {"sources": [{"path": sft}]}
        SFTRecipe(validate(raw)).run()
        model = {"name_or_path": os.path.join(args.out, "sft", "hf")}
    raw = common(args.out, "kto", args.steps, args.seq_len, args.batch)
    raw.update(method="kto", model=model, optim={"lr": args.lr}, kto={"beta": args.beta, "reference": "precompute"})
    raw["data"]["train"] = {"sources": [{"path": train}]}
    raw["data"]["validation"] = {"sources": [{"path": held_out}]}
    raw["callbacks"]["evaluator"] = {"interval": max(args.steps // 4, 1)}
    KTORecipe(validate(raw)).run()
    with open(os.path.join(args.out, "kto", "metrics.jsonl"), encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            if "eval/rewards/accuracies" in row:
                shown = {
                    key: round(row[key], 4) for key in ("eval/rewards/accuracies", "eval/rewards/margins", "eval/kl")
                }
                print(json.dumps({"step": row["step"], **shown}))


if __name__ == "__main__":
    main()
