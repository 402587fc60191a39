"""SFT throughput: honing (packed, padded) against TRL's SFTTrainer (padded, packed padding-free) on the same
chat data, model and tokenizer; prints real (non-padding) tokens per second of each and the ratios.

The same for every system:
- data: the Alpaca demo (999 rows) read by honing's loader as user/assistant conversations, shuffled once
  (seed 0), truncated to ``--max-length`` tokens; rows left with no assistant token are dropped for everyone;
- tokenizer: a 4,096-token BPE trained here on the rows' text (``--tokenizer bpe``, the default: subword
  lengths, as a real model's tokenizer gives) or honing's byte-level one (``--tokenizer byte``: rows of
  ~600 tokens, most cut at max_length, so little padding is left to save), plus the ChatML tokens, with
  honing's ChatML template (its
  ``{% generation %}`` markers give TRL's ``assistant_only_loss`` the same assistant mask honing uses);
- loss on the assistant tokens only (honing ``train_on=assistant``, TRL ``assistant_only_loss=True``);
- model: a random Llama (hidden 128 x 4 layers, seed 0), fp32, sdpa attention, no gradient checkpointing;
- optimizer: fused AdamW (TRL ``optim="adamw_torch_fused"``), the same LR, betas, weight decay, clipping,
  a constant schedule; 8 rows per step.

Systems: honing packed (best-fit rows of max_length, per-document position_ids); honing padded (right
padding, the pre-shuffled order, as TRL's sequential sampler sees it, so both padded systems train on the
very same batches: their real tokens per step must agree); honing padded with ``group_by_length``; TRL
padded (its default collator); TRL ``packing=True`` with the ``bfd`` strategy, which TRL runs padding-free:
each step's rows are flattened into ONE sequence of 8 x max_length tokens. With sdpa (no varlen kernel on
CPU) transformers then attends over a block-diagonal mask of that whole sequence, so this is TRL's
padding-free path as it runs without FlashAttention.

The metric: the non-pad input tokens of the timed steps (counted by wrapping each system's collate
function: step s trains batch s, whatever the loaders prefetch) over the wall time from the end of warm-up
step W to the end of step W+N (measured in each trainer's step-end callback). Each measurement is a fresh
subprocess run alone (2 cores: never two timings at once); the systems alternate order round by round and
the median of the rounds is reported. A system that fails (e.g. a TRL option refused on CPU) is reported
with its error and left out of the ratios.

    .venv/bin/python benchmarks/sft_throughput.py [--rounds 3] [--steps 20] [--warmup 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from typing import Any

import common  # benchmarks/common.py: this folder is on sys.path when a script runs

DEFAULT_DATA = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "alpaca_demo", "alpaca_en_demo.json"
)
TOKENIZER = "bpe"  # set by --tokenizer in each measuring subprocess
BPE_VOCAB = 4096
BATCH = 8  # rows per step: packed rows of max_length, or examples when padded
SEED = 0
LR = 2e-4
WEIGHT_DECAY = 0.1
BETAS = (0.9, 0.95)
MODEL = dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4, intermediate_size=512)


# --- shared assets ------------------------------------------------------------------------------------------
def build_tokenizer(data: str) -> Any:
    """honing's byte-level tokenizer, or a BPE one trained here on the data's text (``TOKENIZER``), with the
    ChatML tokens and template (with generation markers)."""
    from honing.cache import default_cache_dir
    from honing.data.chat.conversation import ensure_special_tokens
    from honing.data.chat.templates import NAMED_TEMPLATES
    from honing.data.tokenizer import build_tokenizer as honing_tokenizer

    if TOKENIZER == "byte":
        tokenizer = honing_tokenizer("byte")
    else:  # trained on the rows' text; cached by content, so every subprocess gets the same one
        with open(data, encoding="utf-8") as handle:
            texts = [" ".join(str(value) for value in row.values()) for row in json.load(handle)]
        tokenizer = honing_tokenizer("bpe", texts=texts, vocab_size=BPE_VOCAB, cache_dir=default_cache_dir())
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


def tokenize(tokenizer: Any, messages: list[dict[str, str]], max_length: int) -> Any:
    """honing's tokenization of one conversation (assistant-only labels), truncated to ``max_length``."""
    from honing.data.chat.conversation import fit_to_length, tokenize_conversation

    item = tokenize_conversation(tokenizer, messages, chat_template=tokenizer.chat_template, train_on="assistant")
    return fit_to_length(item, max_length, "truncate")


def conversations(data: str, tokenizer: Any, max_length: int) -> list[list[dict[str, str]]]:
    """The data set's conversations in a seeded order, keeping those with assistant tokens after truncation."""
    import numpy as np

    from honing.data.chat.conversation import has_trainable_tokens
    from honing.data.row_reader import load_examples

    examples = load_examples([{"path": data, "format": "alpaca"}], seed=SEED).examples
    messages = [example.to_hf_messages() for example in examples]
    messages = [messages[i] for i in np.random.default_rng(SEED).permutation(len(messages))]
    # Both systems drop such rows on their own; dropping them here keeps the row lists identical.
    return [m for m in messages if has_trainable_tokens(tokenize(tokenizer, m, max_length))]


class CountingCollate:
    """Wraps a collate function and records each batch's non-pad input tokens, in batch order."""

    def __init__(self, collate: Any, pad_token_id: int):
        self.collate = collate
        self.pad_token_id = pad_token_id
        self.tokens: list[int] = []

    def __call__(self, items: list[Any]) -> Any:
        batch = self.collate(items)
        self.tokens.append(int((batch["input_ids"] != self.pad_token_id).sum()))
        return batch

    def timed_tokens(self, warmup: int, steps: int) -> int:
        """Tokens of steps warmup+1 .. warmup+steps (batch index = step - 1)."""
        if len(self.tokens) < warmup + steps:
            raise RuntimeError(f"only {len(self.tokens)} batches were collated, expected {warmup + steps}")
        return sum(self.tokens[warmup : warmup + steps])


def result(tokens: int, seconds: float, steps: int) -> dict[str, float]:
    """What one measurement reports."""
    return {"tokens_per_s": tokens / seconds, "real_tokens_per_step": tokens / steps}


# --- honing -------------------------------------------------------------------------------------------------
def run_honing(
    data: str, max_length: int, warmup: int, steps: int, *, packed: bool, group_by_length: bool = False
) -> dict[str, float]:
    """honing's SFT pipeline (tokenize, pack or pad, DataLoader, LMTrainModule, Trainer) with its default
    bookkeeping callbacks (metrics file, speed monitor, GC)."""
    import tempfile

    from honing.data.chat.packing import PackedDataset
    from honing.data.chat.padding import PaddedDataset, pad_collate
    from honing.data.loader import DataLoader, stack_collate
    from honing.interop.olmo_core import TrainerConfig
    from honing.methods.lm import LMTrainModule
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

    tokenizer = build_tokenizer(data)
    tokenized = [tokenize(tokenizer, m, max_length) for m in conversations(data, tokenizer, max_length)]
    pad_id = tokenizer.pad_token_id
    if packed:
        rows, collate = PackedDataset(tokenized, max_length, pad_token_id=pad_id), stack_collate
    else:
        rows, collate = PaddedDataset(tokenized), pad_collate(pad_id)
    counter = CountingCollate(collate, pad_id)
    # Padded and ungrouped: the pre-shuffled order as is (TRL's sequential sampler sees the same batches).
    shuffle = packed or group_by_length
    loader = DataLoader(
        rows, global_batch_size=BATCH, collate_fn=counter, seed=SEED, shuffle=shuffle, group_by_length=group_by_length
    )
    model = build_model(len(tokenizer), max_length)
    optimizer = build_adamw(model, lr=LR, weight_decay=WEIGHT_DECAY, betas=BETAS, eps=1e-8)
    module = LMTrainModule(
        model, optimizer, micro_batch_size=BATCH, grad_clip=1.0, precision="fp32", scheduler={"name": "constant"}
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
    return result(counter.timed_tokens(warmup, steps), times[warmup + steps] - times[warmup], steps)


def run_honing_packed(data: str, max_length: int, warmup: int, steps: int) -> dict[str, float]:
    """(a) honing, packed rows of max_length (padding-free, per-document position_ids)."""
    return run_honing(data, max_length, warmup, steps, packed=True)


def run_honing_padded(data: str, max_length: int, warmup: int, steps: int) -> dict[str, float]:
    """(b) honing, right-padded batches in the same order as TRL's (group_by_length off, TRL's default)."""
    return run_honing(data, max_length, warmup, steps, packed=False)


def run_honing_padded_grouped(data: str, max_length: int, warmup: int, steps: int) -> dict[str, float]:
    """(b') honing, right-padded batches of similar lengths (group_by_length on, seeded shuffle of batches)."""
    return run_honing(data, max_length, warmup, steps, packed=False, group_by_length=True)


# --- TRL ----------------------------------------------------------------------------------------------------
def run_trl(data: str, max_length: int, warmup: int, steps: int, *, packing: bool) -> dict[str, float]:
    """TRL's SFTTrainer on the conversations as a conversational ``{"messages"}`` dataset; no eval, no saves."""
    import tempfile

    import datasets
    from transformers import TrainerCallback
    from trl import SFTConfig, SFTTrainer

    datasets.disable_progress_bars()
    times: dict[int, float] = {}

    class Timer(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step in (warmup, warmup + steps):
                times[state.global_step] = time.perf_counter()

    tokenizer = build_tokenizer(data)
    dataset = datasets.Dataset.from_list([{"messages": m} for m in conversations(data, tokenizer, max_length)])
    model = build_model(len(tokenizer), max_length)
    with tempfile.TemporaryDirectory() as folder:
        args = SFTConfig(
            output_dir=folder,
            per_device_train_batch_size=BATCH,
            max_steps=warmup + steps,
            learning_rate=LR,
            weight_decay=WEIGHT_DECAY,
            adam_beta1=BETAS[0],
            adam_beta2=BETAS[1],
            adam_epsilon=1e-8,
            max_grad_norm=1.0,
            lr_scheduler_type="constant",
            optim="adamw_torch_fused",
            max_length=max_length,
            assistant_only_loss=True,
            packing=packing,
            packing_strategy="bfd",
            # the packed rows in TRL's (seeded random) order; padded: the pre-shuffled order, as honing padded
            train_sampling_strategy="random" if packing else "sequential",
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
        trainer = SFTTrainer(
            model=model, args=args, train_dataset=dataset, processing_class=tokenizer, callbacks=[Timer()]
        )
        # Wrapped after construction: TRL refuses a custom collator with padding-free batches.
        counter = CountingCollate(trainer.data_collator, tokenizer.pad_token_id)
        trainer.data_collator = counter
        trainer.train()
    return result(counter.timed_tokens(warmup, steps), times[warmup + steps] - times[warmup], steps)


def run_trl_padded(data: str, max_length: int, warmup: int, steps: int) -> dict[str, float]:
    """(c) TRL, right-padded batches (its default collator), the same order as honing padded."""
    return run_trl(data, max_length, warmup, steps, packing=False)


def run_trl_packed(data: str, max_length: int, warmup: int, steps: int) -> dict[str, float]:
    """(d) TRL, ``packing=True`` with ``bfd``: padding-free, each step one flattened sequence."""
    return run_trl(data, max_length, warmup, steps, packing=True)


SYSTEMS = {
    "honing packed": run_honing_packed,
    "honing padded": run_honing_padded,
    "honing padded grouped": run_honing_padded_grouped,
    "TRL padded": run_trl_padded,
    "TRL packed (padding-free)": run_trl_packed,
}


# --- driver -------------------------------------------------------------------------------------------------
def measure_in_subprocess(system: str, args: argparse.Namespace) -> dict[str, float]:
    """Run one system in a fresh interpreter with the benchmark's thread count; return its measurement."""
    return common.measure_in_subprocess(
        "sft_throughput",
        f"b.SYSTEMS[{system!r}]({args.data!r}, {args.max_length}, {args.warmup}, {args.steps})",
        threads=args.threads,
        setup=f"b.TOKENIZER = {args.tokenizer!r}",
    )


def ratio(median: dict[str, float], numerator: str, denominator: str) -> float | None:
    """numerator / denominator of the medians, or None when either failed."""
    if numerator not in median or denominator not in median:
        return None
    return median[numerator] / median[denominator]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data", default=os.path.normpath(DEFAULT_DATA))
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument(
        "--tokenizer",
        choices=["bpe", "byte"],
        default="bpe",
        help=f"bpe: {BPE_VOCAB} tokens trained here on the data (subword lengths, as with a real "
        "model's tokenizer); byte: one token per byte (long rows, most cut at max_length)",
    )
    args = parser.parse_args()
    args.data = os.path.abspath(args.data)
    if not os.path.isfile(args.data):
        sys.exit(
            f"--data {args.data}: no such file; expected the Alpaca demo JSON (alpaca_en_demo.json, "
            "a list of instruction/input/output rows)"
        )

    results: dict[str, list[float]] = {name: [] for name in SYSTEMS}
    tokens_per_step: dict[str, float] = {}
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
                print(f"round {round_index + 1} {system:26s} FAILED: {error}", flush=True)
                continue
            results[system].append(measured["tokens_per_s"])
            tokens_per_step[system] = measured["real_tokens_per_step"]
            print(
                f"round {round_index + 1} {system:26s} {measured['tokens_per_s']:10,.0f} real tokens/s "
                f"({measured['real_tokens_per_step']:,.0f} real tokens/step)",
                flush=True,
            )

    median = {name: statistics.median(values) for name, values in results.items() if values}
    trl = [name for name in median if name.startswith("TRL")]
    trl_best = max(trl, key=median.get) if trl else None
    print(
        f"\n{platform.processor() or platform.machine()}, {args.threads} threads, fp32, hidden "
        f"{MODEL['hidden_size']} x {MODEL['num_hidden_layers']} layers, {args.tokenizer} tokenizer, "
        f"{BATCH} rows per step, max_length "
        f"{args.max_length}, {args.steps} timed steps after {args.warmup} warm-up, median of {args.rounds} "
        f"rounds ({time.perf_counter() - started:.0f} s in all)"
    )
    for name in SYSTEMS:
        if name in median:
            print(f"{name:26s} {median[name]:10,.0f} real tokens/s ({tokens_per_step[name]:,.0f} per step)")
        else:
            print(f"{name:26s} failed: {failures[name]}")
    ratios = {
        "honing packed / TRL padded": ratio(median, "honing packed", "TRL padded"),
        f"honing packed / TRL best ({trl_best})": ratio(median, "honing packed", trl_best) if trl_best else None,
        "honing padded / TRL padded": ratio(median, "honing padded", "TRL padded"),
        "honing padded grouped / TRL padded": ratio(median, "honing padded grouped", "TRL padded"),
    }
    for name, value in ratios.items():
        print(f"{name:56s} = {'n/a' if value is None else f'{value:.3f}'}")
    print(
        json.dumps(
            {
                "median_real_tokens_per_s": median,
                "real_tokens_per_step": tokens_per_step,
                "ratios": ratios,
                "failures": failures,
                "args": vars(args),
            }
        )
    )


if __name__ == "__main__":
    main()
