"""On-policy distillation against SFT on the same tokens: a small student learns a teacher's outputs.

1. The teacher: a Llama-style model (byte-level tokens, ChatML) trained by SFT on a task the project generates
   (``generated:sort_digits``: sort a string of digits).
2. The teacher's outputs: completions it samples (temperature 1) for 2,000 training prompts and 200 held-out prompts,
   written as conversations.
3. The same smaller student, from the same random weights, trained for the same steps on the same training rows:
   by SFT (cross-entropy on the teacher's sampled tokens: sequence-level KD), and by ``method: distill`` (the
   generalized JSD to the teacher's distributions; ``lmbda`` of the steps on the student's own samples).
4. Each student scored on the held-out teacher outputs: per-token forward KL(teacher ‖ student), the share of
   positions where its most likely next token is the teacher's, and its cross-entropy on the teacher's tokens.

    python benchmarks/distill_demo.py [--out benchmarks/out/distill] [--steps 400]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from honing.config import validate  # noqa: E402
from honing.data.chat.conversation import tokenize_conversation  # noqa: E402
from honing.data.collate import pad_collate  # noqa: E402
from honing.data.generated.tasks import TASKS  # noqa: E402
from honing.losses import IGNORE_INDEX, next_token_targets  # noqa: E402
from honing.methods.distill_loss import per_token_generalized_jsd  # noqa: E402
from honing.models.generation import end_of_turn_ids, sample_completions  # noqa: E402
from honing.recipes.distill import DistillRecipe  # noqa: E402
from honing.recipes.sft import SFTRecipe  # noqa: E402

TASK = "sort_digits"
TEACHER = {
    "model_type": "llama",
    "hidden_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "intermediate_size": 384,
}
STUDENT = {
    "model_type": "llama",
    "hidden_size": 48,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "intermediate_size": 192,
}


def run_config(method: str, out: str, name: str, *, model: dict, train: str, validation: str, steps: int) -> dict:
    """A CPU-sized run: byte-level tokens, ChatML, padded rows, evaluation every 25 steps."""
    return {
        "method": method,
        "trainer": {"save_folder": os.path.join(out, name), "max_duration": f"{steps}steps", "seed": 0},
        "data": {
            "train": {"sources": [{"path": train}]},
            "validation": {"sources": [{"path": validation}]},
            "chat_template": "chatml",
            "seq_len": 80,
            "global_batch_size": 16,
        },
        "model": {"config": model},
        "optim": {"lr": 2e-3},
        "scheduler": {"name": "cosine", "warmup_steps": max(steps // 20, 1)},
        "callbacks": {
            "evaluator": {"interval": 25},
            "checkpointer": {"save_interval": 10_000},
            "sample": {"enabled": False},
        },
    }


@torch.no_grad()
def write_teacher_outputs(teacher: str, path: str, *, prompts: int, seed: int) -> None:
    """The teacher's sampled completions (temperature 1) to ``prompts`` generated prompts, as conversations."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(teacher)
    model = AutoModelForCausalLM.from_pretrained(teacher).eval()
    rng = random.Random(seed)
    questions = [TASKS[TASK](rng)[0] for _ in range(prompts)]
    stop = [tokenizer.eos_token_id, *end_of_turn_ids(tokenizer)]
    with open(path, "w", encoding="utf-8") as handle:
        for start in range(0, prompts, 200):
            chunk = questions[start : start + 200]
            texts = [
                tokenizer.apply_chat_template(
                    [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False
                )
                for q in chunk
            ]
            rows = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
            width = max(map(len, rows))
            ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(r)) + list(r) for r in rows])
            mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
            completions, alive = sample_completions(
                model,
                ids,
                mask,
                max_new_tokens=24,
                stop_token_ids=stop,
                pad_token_id=tokenizer.pad_token_id,
                seeds=[seed * 1_000_003 + start + i for i in range(len(chunk))],
            )
            texts = tokenizer.batch_decode(
                [c[a.bool()].tolist() for c, a in zip(completions, alive)], skip_special_tokens=True
            )
            for question, text in zip(chunk, texts):
                messages = [{"role": "user", "content": question}, {"role": "assistant", "content": text.strip()}]
                handle.write(json.dumps({"messages": messages}) + "\n")


@torch.no_grad()
def held_out_scores(student: str, teacher: str, path: str) -> dict[str, float]:
    """Per-token forward KL(teacher ‖ student), argmax agreement and the student's cross-entropy on the teacher's
    held-out completion tokens."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(teacher)
    models = [AutoModelForCausalLM.from_pretrained(p).eval() for p in (student, teacher)]
    with open(path, encoding="utf-8") as handle:
        conversations = [json.loads(line)["messages"] for line in handle]
    collate = pad_collate(tokenizer.pad_token_id)
    totals = torch.zeros(4, dtype=torch.float64)
    for start in range(0, len(conversations), 50):
        items = []
        for messages in conversations[start : start + 50]:
            example = tokenize_conversation(tokenizer, messages, chat_template=tokenizer.chat_template)
            items.append({"input_ids": example.input_ids, "labels": example.labels})
        batch = collate(items)
        targets = next_token_targets(batch["labels"])
        keep = targets != IGNORE_INDEX
        student_logits, teacher_logits = (
            model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[keep].double()
            for model in models
        )
        totals += torch.stack(
            [
                per_token_generalized_jsd(student_logits, teacher_logits, beta=0.0).sum(),
                (student_logits.argmax(-1) == teacher_logits.argmax(-1)).sum().double(),
                torch.nn.functional.cross_entropy(student_logits, targets[keep], reduction="sum"),
                keep.sum().double(),
            ]
        )
    tokens = float(totals[3])
    return {
        "forward_kl": float(totals[0]) / tokens,
        "agreement": float(totals[1]) / tokens,
        "cross_entropy": float(totals[2]) / tokens,
    }


def curve(folder: str, key: str) -> list[tuple[int, float]]:
    """``key``'s value at each evaluation of a run (from its metrics.jsonl)."""
    with open(os.path.join(folder, "metrics.jsonl"), encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle]
    return [(row["step"], round(row[key], 4)) for row in rows if key in row]


def main() -> None:
    """Teacher, its outputs, SFT and distilled students, and the held-out table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(HERE, "out", "distill"))
    parser.add_argument("--teacher-steps", type=int, default=300)
    parser.add_argument("--steps", type=int, default=400, help="training steps of each student")
    parser.add_argument("--variants", default="0.0:0.0,0.5:0.0,0.5:0.5", help="distillation runs as lmbda:beta,...")
    args = parser.parse_args()
    out = os.path.abspath(args.out)
    torch.set_num_threads(2)

    teacher_run = os.path.join(out, "teacher")
    if not os.path.exists(os.path.join(teacher_run, "hf", "config.json")):
        raw = run_config(
            "sft",
            out,
            "teacher",
            model=TEACHER,
            train=f"generated:{TASK}?samples=4000&seed=0",
            validation=f"generated:{TASK}?samples=200&seed=1",
            steps=args.teacher_steps,
        )
        SFTRecipe(validate(raw)).run()
    teacher = os.path.join(teacher_run, "hf")
    train, held_out = os.path.join(out, "teacher_train.jsonl"), os.path.join(out, "teacher_held_out.jsonl")
    if not os.path.exists(held_out):
        write_teacher_outputs(teacher, train, prompts=2000, seed=10)
        write_teacher_outputs(teacher, held_out, prompts=200, seed=11)

    student = dict(model=STUDENT, train=train, validation=held_out, steps=args.steps)
    runs = {"sft": run_config("sft", out, "student_sft", **student)}
    runs["sft"]["data"]["packing"] = False  # the same padded rows as distillation's
    for variant in args.variants.split(","):
        lmbda, beta = (float(v) for v in variant.split(":"))
        name = f"distill_l{lmbda}_b{beta}"
        raw = run_config("distill", out, f"student_{name}", **student)
        raw["distill"] = {"teacher_model_name_or_path": teacher, "lmbda": lmbda, "beta": beta, "max_new_tokens": 24}
        runs[name] = raw
    scores = {}
    initial = run_config("sft", out, "student_initial", **{**student, "steps": 1})
    initial["optim"]["lr"] = 1e-12  # one step that moves nothing: the student's random start, exported
    SFTRecipe(validate(initial)).run()
    scores["initial student"] = held_out_scores(os.path.join(out, "student_initial", "hf"), teacher, held_out)
    for name, raw in runs.items():
        recipe = (DistillRecipe if raw["method"] == "distill" else SFTRecipe)(validate(raw))
        recipe.run()
        scores[name] = held_out_scores(os.path.join(raw["trainer"]["save_folder"], "hf"), teacher, held_out)
        key = "eval/forward_kl" if raw["method"] == "distill" else "eval/loss"
        print(f"{name}: {key} at each evaluation {curve(raw['trainer']['save_folder'], key)}")
    print(f"\nheld-out teacher outputs ({held_out}), per completion token:")
    print(f"{'student':<24} {'forward KL':>10} {'agreement':>10} {'cross-entropy':>14}")
    for name, score in scores.items():
        print(f"{name:<24} {score['forward_kl']:>10.4f} {score['agreement']:>10.3f} {score['cross_entropy']:>14.4f}")
    with open(os.path.join(out, "scores.json"), "w", encoding="utf-8") as handle:
        json.dump(scores, handle, indent=2)


if __name__ == "__main__":
    main()
