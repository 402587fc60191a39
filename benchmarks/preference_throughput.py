"""Preference methods beside TRL's trainers: honing's ORPO, KTO and reward model against TRL's ``ORPOTrainer``,
``KTOTrainer`` and ``RewardTrainer`` on the same pairs, model, batch and optimizer; prints examples per second and
peak RSS of each, and the ratios (issue 36's benchmark).

What is shared is ``dpo_throughput.py``'s: Anthropic HH-RLHF pairs (``../shared/data/hh_rlhf``; ``--data generated``
without it) kept when both sequences fit ``--max-length`` tokens, honing's byte-level tokenizer with ChatML, a random
Llama (hidden 128 x 4 layers, fp32, sdpa; for the reward model the same body with a one-label score head), AdamW
(lr 5e-5, betas 0.9 / 0.999, no decay), a constant LR, clipping at 1.0, 8 pairs a step in the data's order (KTO: the
16 rows they become), beta 0.1. honing runs as ``honing train`` does (the method's recipe builds everything from
the config; a timer callback is added to the built trainer), with its defaults (ORPO and KTO: a micro-batch's pairs
or rows packed into one row, attended pair by pair); KTO's reference is a frozen copy on both sides. An example is a
pair (ORPO, reward) or a row (KTO). Each measurement is a fresh subprocess run alone; systems alternate order round
by round; the median of the rounds is reported.

    .venv/bin/python benchmarks/preference_throughput.py --method orpo|kto|reward [--rounds 3] [--steps 10]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from typing import Any

import common  # benchmarks/common.py: this folder is on sys.path when a script runs
import dpo_throughput as shared  # the pairs, tokenizer, model and result of the DPO benchmark

PAIRS_PER_STEP = shared.PAIRS_PER_STEP
#: what a step takes, per method: pairs, or for KTO the rows the pairs become (two each)
EXAMPLES_PER_STEP = {"orpo": PAIRS_PER_STEP, "kto": 2 * PAIRS_PER_STEP, "reward": PAIRS_PER_STEP}
BETA = shared.BETA


def write_rows(data: str, max_length: int, count: int, folder: str) -> tuple[str, list[dict[str, Any]]]:
    """The first ``count`` kept pairs as conversational prompt / chosen / rejected rows: a JSONL file for honing and
    the same rows for TRL."""
    tokenizer = shared.build_tokenizer()
    kept, _ = shared.pairs(data, tokenizer, max_length, count)
    rows = [{"prompt": pair.prompt, "chosen": pair.chosen, "rejected": pair.rejected} for pair in kept]
    path = os.path.join(folder, "pairs.jsonl")
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in rows)
    return path, rows


def honing_run(method: str, data: str, max_length: int, warmup: int, steps: int, **sections: Any) -> dict[str, float]:
    """``honing train`` of ``method`` as a user runs it (the recipe builds the run from its config), with a timer
    callback added to the built trainer: the same model, tokenizer, optimizer and batch as TRL's side."""
    from honing.config import validate
    from honing.distributed import prepare_training_environment, teardown_training_environment
    from honing.recipes import recipe_for
    from honing.train import Callback

    times: dict[int, float] = {}

    class Timer(Callback):
        def on_step_end(self):
            if self.step in (warmup, warmup + steps):
                times[self.step] = time.perf_counter()

    batch = EXAMPLES_PER_STEP[method]
    with tempfile.TemporaryDirectory() as folder:
        path, _ = write_rows(data, max_length, (warmup + steps) * PAIRS_PER_STEP, folder)
        config = validate(
            {
                "method": method,
                "trainer": {"save_folder": os.path.join(folder, "run"), "max_duration": f"{warmup + steps}steps"},
                "data": {
                    "train": {"sources": [{"path": path, "format": "preference_prompt"}]},
                    "chat_template": "chatml",
                    "seq_len": max_length,
                    "global_batch_size": batch,
                    "shuffle": False,
                    "cache_dir": os.path.join(folder, "cache"),
                },
                "tokenizer": {"kind": "byte"},
                "model": {"config": {"model_type": "llama", **shared.MODEL, "attn_implementation": "sdpa"}},
                "optim": {"lr": shared.LR, "weight_decay": 0.0, "betas": [0.9, 0.999], "eps": 1e-8, "grad_clip": 1.0},
                "scheduler": {"name": "constant"},
                "callbacks": {
                    "checkpointer": {"save_interval": 10**6},  # the final save comes after the timed steps
                    "evaluator": {"enabled": False},
                    "console": {"enabled": False},
                    # completions are sampled by the generative methods only (a reward model writes none)
                    **({} if method == "reward" else {"sample": {"enabled": False}}),
                },
                **sections,
            }
        )
        prepare_training_environment(seed=0)
        try:
            trainer = recipe_for(config).build()
            trainer.add_callback("timer", Timer())
            trainer.fit()
        finally:
            teardown_training_environment()
    return shared.result(steps * batch, times[warmup + steps] - times[warmup])


def honing_orpo(data: str, max_length: int, warmup: int, steps: int) -> dict[str, float]:
    """``method: orpo`` (its pair step with ``ORPOLoss``), beta as TRL's."""
    return honing_run("orpo", data, max_length, warmup, steps, orpo={"beta": BETA})


def honing_kto(data: str, max_length: int, warmup: int, steps: int) -> dict[str, float]:
    """``method: kto`` on the pairs turned into two rows each (as TRL's ``unpair_preference_dataset``), a frozen
    copy as the reference (TRL's default)."""
    return honing_run("kto", data, max_length, warmup, steps, kto={"beta": BETA, "reference": "copy"})


def honing_reward(data: str, max_length: int, warmup: int, steps: int) -> dict[str, float]:
    """``method: reward``: a one-label score head on the same body, Bradley-Terry on the pairs."""
    return honing_run("reward", data, max_length, warmup, steps)


def trl_run(method: str, data: str, max_length: int, warmup: int, steps: int) -> dict[str, float]:
    """TRL's trainer of ``method`` on the same conversational pairs (KTO: unpaired as TRL's
    ``unpair_preference_dataset`` does); the same optimizer settings; no eval, no saves."""
    import copy

    import datasets
    from transformers import TrainerCallback

    datasets.disable_progress_bars()
    times: dict[int, float] = {}

    class Timer(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step in (warmup, warmup + steps):
                times[state.global_step] = time.perf_counter()

    tokenizer = shared.build_tokenizer()
    batch = EXAMPLES_PER_STEP[method]
    common_args = dict(
        per_device_train_batch_size=batch,
        max_steps=warmup + steps,
        learning_rate=shared.LR,
        weight_decay=0.0,
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=1e-8,
        max_grad_norm=1.0,
        lr_scheduler_type="constant",
        optim="adamw_torch_fused",
        max_length=max_length,
        bf16=False,
        fp16=False,
        use_cpu=True,
        logging_steps=10**6,
        save_strategy="no",
        eval_strategy="no",
        report_to=[],
        dataloader_num_workers=0,
        seed=shared.SEED,
        disable_tqdm=True,
    )
    with tempfile.TemporaryDirectory() as folder:
        _, rows = write_rows(data, max_length, (warmup + steps) * PAIRS_PER_STEP, folder)
        dataset = datasets.Dataset.from_list(rows)
        extra: dict[str, Any] = {}
        if method == "orpo":
            from trl.experimental.orpo import ORPOConfig as Config
            from trl.experimental.orpo import ORPOTrainer as Trainer

            model, settings = shared.build_model(len(tokenizer), max_length), {"beta": BETA}
        elif method == "kto":
            from trl import KTOConfig as Config
            from trl import KTOTrainer as Trainer
            from trl.data_utils import unpair_preference_dataset

            model, settings = shared.build_model(len(tokenizer), max_length), {"beta": BETA}
            dataset = unpair_preference_dataset(dataset)
            extra["ref_model"] = copy.deepcopy(model)
        else:
            import torch
            from transformers import LlamaConfig, LlamaForSequenceClassification
            from trl import RewardConfig as Config
            from trl import RewardTrainer as Trainer

            torch.manual_seed(shared.SEED)
            config = LlamaConfig(
                **shared.MODEL, vocab_size=len(tokenizer), max_position_embeddings=max_length, num_labels=1,
                pad_token_id=tokenizer.pad_token_id, attn_implementation="sdpa",
            )  # fmt: skip
            model, settings = LlamaForSequenceClassification(config), {}
        args = Config(output_dir=folder, **common_args, **settings)
        trainer = Trainer(
            model=model, args=args, train_dataset=dataset, processing_class=tokenizer, callbacks=[Timer()], **extra
        )
        trainer.train()
    return shared.result(steps * batch, times[warmup + steps] - times[warmup])


#: method → (system name → its measurement)
METHODS: dict[str, dict[str, Any]] = {
    "orpo": {"honing": honing_orpo, "TRL": functools.partial(trl_run, "orpo")},
    "kto": {"honing": honing_kto, "TRL": functools.partial(trl_run, "kto")},
    "reward": {"honing": honing_reward, "TRL": functools.partial(trl_run, "reward")},
}


def main() -> None:
    """Alternate the method's systems round by round, one subprocess at a time; print medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", choices=sorted(METHODS), default="orpo")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument(
        "--data", default=os.path.normpath(shared.DEFAULT_DATA), help="HH-RLHF JSONL(.gz) or 'generated'"
    )
    args = parser.parse_args()
    if args.data != "generated":
        args.data = os.path.abspath(args.data)
        if not os.path.isfile(args.data):
            sys.exit(f"--data {args.data}: no such file; give the HH-RLHF file or --data generated")
    systems = METHODS[args.method]
    results: dict[str, list[dict[str, float]]] = {name: [] for name in systems}
    failures: dict[str, str] = {}
    started = time.perf_counter()
    for round_index in range(args.rounds):
        order = list(systems) if round_index % 2 == 0 else list(reversed(systems))
        for system in order:
            if system in failures:
                continue
            call = (
                f"b.METHODS[{args.method!r}][{system!r}]({args.data!r}, {args.max_length}, {args.warmup}, {args.steps})"
            )
            try:
                measured = common.measure_in_subprocess("preference_throughput", call, threads=args.threads)
            except RuntimeError as error:
                failures[system] = str(error)
                print(f"round {round_index + 1} {system:8s} FAILED: {error}", flush=True)
                continue
            results[system].append(measured)
            print(
                f"round {round_index + 1} {system:8s} {measured['pairs_per_s']:8.2f} examples/s, "
                f"peak RSS {measured['peak_rss_mib']:,.0f} MiB",
                flush=True,
            )
    median = {
        name: {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        for name, runs in results.items()
        if runs
    }
    print(
        f"\n{args.method}: {platform.processor() or platform.machine()}, {args.threads} threads, fp32, hidden "
        f"{shared.MODEL['hidden_size']} x {shared.MODEL['num_hidden_layers']} layers, byte tokenizer, "
        f"{PAIRS_PER_STEP} pairs per step, max_length {args.max_length}, beta {BETA}, {args.steps} timed steps after "
        f"{args.warmup} warm-up, median of {args.rounds} rounds ({time.perf_counter() - started:.0f} s in all)"
    )
    for name in systems:
        if name in median:
            values = median[name]
            print(f"{name:8s} {values['pairs_per_s']:8.2f} examples/s, peak RSS {values['peak_rss_mib']:,.0f} MiB")
        else:
            print(f"{name:8s} failed: {failures[name]}")
    ratios = {}
    if "honing" in median and "TRL" in median:
        ratios["honing / TRL examples/s"] = median["honing"]["pairs_per_s"] / median["TRL"]["pairs_per_s"]
        ratios["honing / TRL peak RSS"] = median["honing"]["peak_rss_mib"] / median["TRL"]["peak_rss_mib"]
    for name, value in ratios.items():
        print(f"{name:24s} = {value:.3f}")
    print(json.dumps({"method": args.method, "median": median, "ratios": ratios, "failures": failures}))


if __name__ == "__main__":
    main()
