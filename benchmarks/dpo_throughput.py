"""DPO throughput and memory: honing (reference copy, and precomputed) against TRL's DPOTrainer (reference copy) on
the same pairs, model and batch; prints pairs per second and peak RSS of each, and the ratios.

The same for every system:
- pairs: Anthropic HH-RLHF (``../shared/data/hh_rlhf``, split at the last shared ``Assistant:`` turn by honing's
  reader; without the file, ``--data generated``: the project's addition pairs), as conversational prompt /
  chosen / rejected, kept only when both sequences fit ``--max-length`` (256) tokens so that neither system
  truncates (their truncation rules differ) and both see the very same tokens;
- tokenizer: honing's byte-level one plus the ChatML tokens and template (TRL tokenizes the pairs to the same
  ids: prompt with the generation prompt, each completion the rest);
- model: a random Llama (hidden 128 x 4 layers, seed 0), fp32, sdpa; its reference a frozen copy;
- optimizer: fused AdamW, the same LR, betas, weight decay and clipping, a constant schedule; 8 pairs per step
  (16 sequences in one forward), in the data's order (TRL's sequential sampler; honing's loader unshuffled);
- β = 0.1, the sigmoid loss.

honing runs with its defaults: each micro-batch's pairs packed into one row without padding, attended pair by pair
(``dpo.packed_pairs``). honing ``precompute`` scores the reference once before training (timed separately, not in
pairs/s). The metric: the timed steps' pairs over the wall time from the end of warm-up step W to the end of step
W+N; peak RSS is the measuring process's (``ru_maxrss``), imports included. Each measurement is a fresh subprocess
run alone; systems alternate order round by round and the median of the rounds is reported.

    .venv/bin/python benchmarks/dpo_throughput.py [--rounds 3] [--steps 10] [--warmup 2] [--threads 2]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import resource
import statistics
import sys
import time
from typing import Any

import common  # benchmarks/common.py: this folder is on sys.path when a script runs

DEFAULT_DATA = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "hh_rlhf", "harmless-base-test.jsonl.gz"
)
PAIRS_PER_STEP = 8
SEED = 0
LR = 5e-5
BETA = 0.1
MODEL = dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4, intermediate_size=512)


# --- shared assets ------------------------------------------------------------------------------------------
def build_tokenizer() -> Any:
    """honing's byte-level tokenizer with the ChatML tokens and template."""
    from honing.data.chat.conversation import ensure_special_tokens
    from honing.data.chat.templates import NAMED_TEMPLATES
    from honing.data.tokenizer import build_tokenizer as honing_tokenizer

    tokenizer = honing_tokenizer("byte")
    ensure_special_tokens(tokenizer, "chatml")
    tokenizer.chat_template = NAMED_TEMPLATES["chatml"]
    return tokenizer


def build_model(vocab_size: int, max_length: int) -> Any:
    """The shared random Llama (seed 0, fp32, sdpa)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(**MODEL, vocab_size=vocab_size, max_position_embeddings=max_length, attn_implementation="sdpa")
    return LlamaForCausalLM(config)


def pairs(data: str, tokenizer: Any, max_length: int, count: int) -> tuple[list[Any], list[Any]]:
    """The first ``count`` pairs whose two sequences fit ``max_length`` tokens, and their tokenization."""
    from honing.data.generated.preferences import generate_rows
    from honing.data.preference.batches import tokenize_pair
    from honing.data.preference.pairs import load_pairs, to_pair

    if data == "generated":
        found = [to_pair(row, "preference") for row in generate_rows("addition_preference", samples=count, seed=0)]
    else:
        found = load_pairs([{"path": data}], bad_rows="skip").pairs
    kept, tokenized = [], []
    for pair in found:
        item = tokenize_pair(tokenizer, pair, chat_template=tokenizer.chat_template)
        if item.length <= max_length:
            kept.append(pair)
            tokenized.append(item)
        if len(kept) == count:
            break
    return kept, tokenized


def result(pairs_done: int, seconds: float, extra: dict[str, float] | None = None) -> dict[str, float]:
    """What one measurement reports (peak RSS in MiB: ru_maxrss is in KiB on Linux)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"pairs_per_s": pairs_done / seconds, "peak_rss_mib": peak, **(extra or {})}


# --- honing -------------------------------------------------------------------------------------------------
def run_honing(data: str, max_length: int, warmup: int, steps: int, *, reference: str) -> dict[str, float]:
    """honing's DPO pieces (PairDataset, PairCollator, DataLoader, DPOTrainModule, Trainer) with its default
    bookkeeping callbacks (metrics file, speed monitor, GC)."""
    import contextlib
    import tempfile

    from honing.data.loader import DataLoader
    from honing.data.preference.batches import PairCollator, PairDataset
    from honing.interop.olmo_core import TrainerConfig
    from honing.methods.dpo import DPOTrainModule, compute_reference_logps
    from honing.optim.param_groups import build_adamw
    from honing.train import Callback
    from honing.train.callbacks.gc import GarbageCollectorCallback
    from honing.train.callbacks.metrics_file import MetricsFileCallback
    from honing.train.callbacks.speed_monitor import SpeedMonitorCallback

    times: dict[int, float] = {}

    class Timer(Callback):
        def on_step_end(self):
            if self.step in (warmup, warmup + steps):
                times[self.step] = time.perf_counter()

    tokenizer = build_tokenizer()
    _, tokenized = pairs(data, tokenizer, max_length, (warmup + steps) * PAIRS_PER_STEP)
    dataset = PairDataset(tokenized)
    collator = PairCollator(tokenizer.pad_token_id)
    model = build_model(len(tokenizer), max_length)
    reference_model, extra = None, {}
    if reference == "copy":
        reference_model = copy.deepcopy(model).eval().requires_grad_(False)
    else:
        started = time.perf_counter()
        batches = (
            collator([dataset[i] for i in range(start, min(start + PAIRS_PER_STEP, len(dataset)))])
            for start in range(0, len(dataset), PAIRS_PER_STEP)
        )
        dataset.with_reference(
            *compute_reference_logps(
                model, batches, collator=collator, device=model.device, autocast=contextlib.nullcontext
            )
        )
        extra["precompute_s"] = time.perf_counter() - started
    loader = DataLoader(dataset, global_batch_size=PAIRS_PER_STEP, collate_fn=collator, seed=SEED, shuffle=False)
    module = DPOTrainModule(
        model,
        build_adamw(model, lr=LR, weight_decay=0.0, betas=(0.9, 0.999), eps=1e-8),
        beta=BETA,
        reference=reference,
        reference_model=reference_model,
        micro_batch_size=PAIRS_PER_STEP,
        grad_clip=1.0,
        collator=collator,
        scheduler={"name": "constant"},
    )
    with tempfile.TemporaryDirectory() as folder:
        TrainerConfig(
            save_folder=folder,
            max_duration=f"{warmup + steps}steps",
            metrics_collect_interval=10,
            callbacks={
                "metrics_file": MetricsFileCallback(),
                "timer": Timer(),
                "speed_monitor": SpeedMonitorCallback(seq_len=max_length, precision="fp32"),
                "gc": GarbageCollectorCallback(interval=100),
            },
        ).build(module, loader).fit()
    return result(steps * PAIRS_PER_STEP, times[warmup + steps] - times[warmup], extra)


def run_honing_copy(data: str, max_length: int, warmup: int, steps: int) -> dict[str, float]:
    """honing, ``dpo.reference: copy``: a frozen copy scores every batch."""
    return run_honing(data, max_length, warmup, steps, reference="copy")


def run_honing_precompute(data: str, max_length: int, warmup: int, steps: int) -> dict[str, float]:
    """honing, ``dpo.reference: precompute``: reference log-probs scored once before training."""
    return run_honing(data, max_length, warmup, steps, reference="precompute")


# --- TRL ----------------------------------------------------------------------------------------------------
def run_trl(data: str, max_length: int, warmup: int, steps: int) -> dict[str, float]:
    """TRL's DPOTrainer with a frozen reference copy, on the same conversational pairs; no eval, no saves."""
    import tempfile

    import datasets
    from transformers import TrainerCallback
    from trl import DPOConfig, DPOTrainer

    datasets.disable_progress_bars()
    times: dict[int, float] = {}

    class Timer(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step in (warmup, warmup + steps):
                times[state.global_step] = time.perf_counter()

    tokenizer = build_tokenizer()
    kept, _ = pairs(data, tokenizer, max_length, (warmup + steps) * PAIRS_PER_STEP)
    rows = [{"prompt": pair.prompt, "chosen": pair.chosen, "rejected": pair.rejected} for pair in kept]
    model = build_model(len(tokenizer), max_length)
    reference = copy.deepcopy(model)
    with tempfile.TemporaryDirectory() as folder:
        args = DPOConfig(
            output_dir=folder,
            per_device_train_batch_size=PAIRS_PER_STEP,
            max_steps=warmup + steps,
            learning_rate=LR,
            weight_decay=0.0,
            adam_beta1=0.9,
            adam_beta2=0.999,
            adam_epsilon=1e-8,
            max_grad_norm=1.0,
            lr_scheduler_type="constant",
            optim="adamw_torch_fused",
            max_length=max_length,
            beta=BETA,
            loss_type=["sigmoid"],
            train_sampling_strategy="sequential",
            bf16=False,
            fp16=False,
            activation_checkpointing=False,
            use_cpu=True,
            logging_steps=10**6,
            save_strategy="no",
            eval_strategy="no",
            report_to=[],
            dataloader_num_workers=0,
            seed=SEED,
            disable_tqdm=True,
        )
        trainer = DPOTrainer(
            model=model,
            ref_model=reference,
            args=args,
            train_dataset=datasets.Dataset.from_list(rows),
            processing_class=tokenizer,
            callbacks=[Timer()],
        )
        trainer.train()
    return result(steps * PAIRS_PER_STEP, times[warmup + steps] - times[warmup])


SYSTEMS = {
    "honing copy": run_honing_copy,
    "honing precompute": run_honing_precompute,
    "TRL copy": run_trl,
}


# --- driver -------------------------------------------------------------------------------------------------
def measure_in_subprocess(system: str, args: argparse.Namespace) -> dict[str, float]:
    """Run one system in a fresh interpreter with the benchmark's thread count; return its measurement."""
    return common.measure_in_subprocess(
        "dpo_throughput",
        f"b.SYSTEMS[{system!r}]({args.data!r}, {args.max_length}, {args.warmup}, {args.steps})",
        threads=args.threads,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--data", default=os.path.normpath(DEFAULT_DATA), help="HH-RLHF JSONL(.gz), or 'generated'")
    args = parser.parse_args()
    if args.data != "generated":
        args.data = os.path.abspath(args.data)
        if not os.path.isfile(args.data):
            sys.exit(f"--data {args.data}: no such file; give the HH-RLHF file or --data generated")

    results: dict[str, list[dict[str, float]]] = {name: [] for name in SYSTEMS}
    failures: dict[str, str] = {}
    started = time.perf_counter()
    for round_index in range(args.rounds):
        order = list(SYSTEMS) if round_index % 2 == 0 else list(reversed(SYSTEMS))
        for system in order:
            if system in failures:
                continue
            try:
                measured = measure_in_subprocess(system, args)
            except RuntimeError as error:
                failures[system] = str(error)
                print(f"round {round_index + 1} {system:18s} FAILED: {error}", flush=True)
                continue
            results[system].append(measured)
            print(
                f"round {round_index + 1} {system:18s} {measured['pairs_per_s']:8.2f} pairs/s, "
                f"peak RSS {measured['peak_rss_mib']:,.0f} MiB",
                flush=True,
            )

    median = {
        name: {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        for name, runs in results.items()
        if runs
    }
    print(
        f"\n{platform.processor() or platform.machine()}, {args.threads} threads, fp32, hidden "
        f"{MODEL['hidden_size']} x {MODEL['num_hidden_layers']} layers, byte tokenizer, {PAIRS_PER_STEP} pairs per "
        f"step, max_length {args.max_length}, beta {BETA}, {args.steps} timed steps after {args.warmup} warm-up, "
        f"median of {args.rounds} rounds ({time.perf_counter() - started:.0f} s in all)"
    )
    for name in SYSTEMS:
        if name in median:
            values = median[name]
            extra = f", reference precomputed in {values['precompute_s']:.1f} s" if "precompute_s" in values else ""
            print(
                f"{name:18s} {values['pairs_per_s']:8.2f} pairs/s ({PAIRS_PER_STEP / values['pairs_per_s']:.3f} s/step)"
                f", peak RSS {values['peak_rss_mib']:,.0f} MiB{extra}"
            )
        else:
            print(f"{name:18s} failed: {failures[name]}")
    ratios = {}
    if "TRL copy" in median:
        trl = median["TRL copy"]
        for name in ("honing copy", "honing precompute"):
            if name in median:
                ratios[f"{name} / TRL copy pairs/s"] = median[name]["pairs_per_s"] / trl["pairs_per_s"]
                ratios[f"{name} / TRL copy peak RSS"] = median[name]["peak_rss_mib"] / trl["peak_rss_mib"]
    for name, value in ratios.items():
        print(f"{name:42s} = {value:.3f}")
    print(json.dumps({"median": median, "ratios": ratios, "failures": failures}))


if __name__ == "__main__":
    main()
