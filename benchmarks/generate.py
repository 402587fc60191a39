"""``honing generate`` (the lean KV-cached decoder) vs a transformers ``generate`` loop: the same model, prompts,
batches and settings (greedy, 16 new tokens, batches of 32 left-padded prompts sorted by length, the same stop
tokens); prints the seconds each spends generating, the ratio, and whether their answers agree.

The model is the GRPO example's (``runs/grpo/hf``: ``honing train configs/sft-full.yaml`` then
``configs/grpo.yaml``), the prompts its 200 held-out words (``generated:reverse?samples=200&seed=99&letters=8-10``).
Each measurement is a fresh subprocess, one at a time, the two alternating round by round; the median is reported.

    .venv/bin/python benchmarks/generate.py [--model runs/grpo/hf] [--rounds 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

PROMPTS = "generated:reverse?samples=200&seed=99&letters=8-10"
MAX_NEW_TOKENS = 16
BATCH_SIZE = 32


def prompts() -> list[str]:
    """The GRPO example's held-out questions."""
    from honing.data.generated.tasks import generate_rows

    rows = generate_rows("reverse", samples=200, seed=99, letters=(8, 10))
    return [row["messages"][0]["content"] for row in rows]


def run_honing(model_dir: str) -> tuple[float, list[str]]:
    """Seconds to answer every prompt with honing's generator (what ``honing generate --file`` runs)."""
    from honing.infer.generate import Sampling, TextGenerator
    from honing.infer.model_source import load_model

    loaded = load_model(model_dir, device="cpu")
    generator = TextGenerator(loaded, Sampling(max_new_tokens=MAX_NEW_TOKENS), batch_size=BATCH_SIZE)
    questions = prompts()
    generator.complete(questions[:BATCH_SIZE])  # warm-up: first-call allocations, as for transformers below
    start = time.perf_counter()
    answers = generator.complete(questions)
    return time.perf_counter() - start, answers


def run_transformers(model_dir: str) -> tuple[float, list[str]]:
    """Seconds to answer every prompt with ``model.generate`` over the same batches."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from honing.infer.generate import stop_token_ids

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    stops = stop_token_ids(tokenizer)
    texts = [
        tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        for q in prompts()
    ]
    encoded = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    batches = [order[i : i + BATCH_SIZE] for i in range(0, len(order), BATCH_SIZE)]

    def answer(rows: list[int]) -> list[str]:
        width = max(len(encoded[i]) for i in rows)
        ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, index in enumerate(rows):
            ids[row, width - len(encoded[index]) :] = torch.tensor(encoded[index])
            mask[row, width - len(encoded[index]) :] = 1
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=MAX_NEW_TOKENS,
                do_sample=False,
                eos_token_id=stops,
                pad_token_id=tokenizer.pad_token_id,
            )
        return [
            tokenizer.decode([t for t in row[width:].tolist() if t not in stops], skip_special_tokens=True)
            for row in out
        ]

    answer(batches[0])  # warm-up
    answers = [""] * len(encoded)
    start = time.perf_counter()
    for rows in batches:
        for index, text in zip(rows, answer(rows)):
            answers[index] = text
    return time.perf_counter() - start, answers


def worker(system: str, model_dir: str, threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    seconds, answers = (run_honing if system == "honing" else run_transformers)(model_dir)
    print(json.dumps({"seconds": seconds, "answers": answers}))


def measure(system: str, model_dir: str, threads: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    command = [sys.executable, __file__, "--worker", system, "--model", model_dir, "--threads", str(threads)]
    out = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/grpo/hf")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--worker", choices=["honing", "transformers"])
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.model, args.threads)
        return
    if not os.path.isdir(args.model):
        sys.exit(f"{args.model} does not exist: train configs/sft-full.yaml, then configs/grpo.yaml")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch threads {args.threads}")
    print(f"load before: {os.getloadavg()}")
    times: dict[str, list[float]] = {"honing": [], "transformers": []}
    answers: dict[str, list[str]] = {}
    for round_index in range(args.rounds):
        for system in ("transformers", "honing") if round_index % 2 else ("honing", "transformers"):
            result = measure(system, args.model, args.threads)
            times[system].append(result["seconds"])
            answers[system] = result["answers"]
            print(f"round {round_index + 1} {system}: {result['seconds']:.2f} s", flush=True)
    honing, transformers = statistics.median(times["honing"]), statistics.median(times["transformers"])
    same = sum(a == b for a, b in zip(answers["honing"], answers["transformers"]))
    print(f"load after: {os.getloadavg()}")
    print(
        f"200 prompts, greedy, {MAX_NEW_TOKENS} new tokens, batches of {BATCH_SIZE}: honing {honing:.2f} s, "
        f"transformers generate {transformers:.2f} s: {transformers / honing:.2f}x; same answers {same}/200"
    )


if __name__ == "__main__":
    main()
