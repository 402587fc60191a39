"""``honing generate`` (the lean KV-cached decoder) vs transformers' ``generate``: the same model, prompts and
settings (greedy, 16 new tokens, the same stop tokens), transformers over the same batches (32 left-padded prompts
sorted by length) and over one prompt at a time (the loop a user writes first); prints the seconds each spends
generating (model loaded, one warm-up batch first), the ratios, and whether their answers agree.

The model is the GRPO example's (``runs/grpo/hf``: ``honing train configs/sft-full.yaml`` then
``configs/grpo.yaml``), the prompts its 200 held-out words (``generated:reverse?samples=200&seed=99&letters=8-10``).
Each measurement is a fresh subprocess, one at a time, the order rotating round by round; medians are reported.

    .venv/bin/python benchmarks/generate.py [--model runs/grpo/hf] [--rounds 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

PROMPTS = "generated:reverse?samples=200&seed=99&letters=8-10"
MAX_NEW_TOKENS = 16
BATCH_SIZE = 32
#: honing; transformers' generate over the same batches; and over one prompt at a time
SYSTEMS = ("honing", "transformers", "transformers-loop")


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


def run_transformers(model_dir: str, batch_size: int = BATCH_SIZE) -> tuple[float, list[str]]:
    """Seconds to answer every prompt with ``model.generate`` over the same batches (``batch_size`` 1: the loop a
    user writes first, one prompt at a time)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from honing.infer.generate import stop_token_ids

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    stops = stop_token_ids(tokenizer)
    questions = prompts()

    def encode(question: str) -> list[int]:
        messages = [{"role": "user", "content": question}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return tokenizer(text, add_special_tokens=False)["input_ids"]

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

    encoded = [encode(q) for q in questions[:batch_size]]
    answer(list(range(len(encoded))))  # warm-up
    # timed as honing's is: rendering the chat template and tokenizing included
    start = time.perf_counter()
    encoded = [encode(q) for q in questions]
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    answers = [""] * len(encoded)
    for rows in (order[i : i + batch_size] for i in range(0, len(order), batch_size)):
        for index, text in zip(rows, answer(rows)):
            answers[index] = text
    return time.perf_counter() - start, answers


def worker(system: str, model_dir: str, threads: int) -> None:
    """One measurement in this process: its seconds and answers as a JSON line."""
    import torch

    torch.set_num_threads(threads)
    if system == "honing":
        seconds, answers = run_honing(model_dir)
    else:
        seconds, answers = run_transformers(model_dir, batch_size=1 if system == "transformers-loop" else BATCH_SIZE)
    print(json.dumps({"seconds": seconds, "answers": answers}))


def measure(system: str, model_dir: str, threads: int) -> dict:
    """One measurement in a fresh subprocess."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    command = [sys.executable, __file__, "--worker", system, "--model", model_dir, "--threads", str(threads)]
    out = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    """Alternate the two systems for ``--rounds`` rounds; print the medians and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/grpo/hf")
    parser.add_argument("--rounds", type=int, default=3)
    # one torch thread: with two on this 2-core machine, any other process makes OpenMP's workers spin-wait and a
    # 0.3 s measurement take 5-30 s (seen here); one thread measures the decoders, not the neighbours
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--worker", choices=SYSTEMS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.model, args.threads)
        return
    if not os.path.isdir(args.model):
        sys.exit(f"{args.model} does not exist: train configs/sft-full.yaml, then configs/grpo.yaml")
    from honing.train.peak_flops import cpu_model_name

    print(f"{cpu_model_name()}, {os.cpu_count()} CPUs, torch threads {args.threads}")
    print(f"load before: {os.getloadavg()}")
    times: dict[str, list[float]] = {system: [] for system in SYSTEMS}
    answers: dict[str, list[str]] = {}
    for round_index in range(args.rounds):
        order = SYSTEMS[round_index % len(SYSTEMS) :] + SYSTEMS[: round_index % len(SYSTEMS)]  # rotate who goes first
        for system in order:
            result = measure(system, args.model, args.threads)
            times[system].append(result["seconds"])
            answers[system] = result["answers"]
            print(f"round {round_index + 1} {system}: {result['seconds']:.2f} s", flush=True)
    print(f"load after: {os.getloadavg()}")
    honing = statistics.median(times["honing"])
    print(f"200 prompts, greedy, {MAX_NEW_TOKENS} new tokens; honing in batches of {BATCH_SIZE}: {honing:.2f} s")
    for system, label in (("transformers", f"batches of {BATCH_SIZE}"), ("transformers-loop", "one prompt at a time")):
        median = statistics.median(times[system])
        same = sum(a == b for a, b in zip(answers["honing"], answers[system]))
        print(
            f"  transformers generate, {label}: {median:.2f} s = {median / honing:.2f}x honing; same answers {same}/200"
        )


if __name__ == "__main__":
    main()
