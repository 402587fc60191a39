"""Vision-language SFT throughput: honing's ``vl_sft`` against the transformers ``Trainer`` (a hand-written VLM
collator) and TRL's ``SFTTrainer`` in its VLM mode, on the same images, model, processor and batches; prints
samples per second and real (non-padding) tokens per second of each, the ratios, and each run's mean loss.

The same for every system:
- data: the mini-OCR task (``honing.data.generated.ocr``, the ``generated:ocr`` rows): images of short random strings
  typed with PIL's default font, one character per 28-pixel cell, with the instruction "Transcribe the text in the
  image." and the string as the reply; ``(warm-up + steps) x batch`` rows written once per run of this script, read
  in file order (no shuffle, no length grouping: honing's loader unshuffled, the Trainers' sequential sampler), so
  the three systems train on the very same batches and their real tokens per step must agree;
- images are loaded from their PNG files for every batch and processed on the fly (honing runs the image
  processor on each micro-batch's images beside the ids it stored when the data set was built, as it does for
  every Qwen-VL family; the Trainer's collator and TRL's run the whole processor on the batch);
- processor: a tiny Qwen2-VL processor (``honing.models.tiny_vl``: a byte-level tokenizer with the family's
  special tokens, the Qwen2-VL chat template with ``{% generation %}`` markers, the stock ``Qwen2VLImageProcessor``)
  and model: the tiny random Qwen2-VL of ``tiny_vl_config("qwen2_vl")`` (hidden 64 x 2 layers, a 2-block vision
  tower), built once (seed 0) and saved with the processor to one folder that every system loads, so all start
  from the same weights; fp32, sdpa attention, no gradient checkpointing;
- training: full fine-tuning of the language model and the projector (``model.visual.merger``) with the vision
  tower frozen (``model.visual.patch_embed`` / ``.blocks``: honing ``model.lora: null`` with its default
  ``model.freeze_vision: true``; the same parameters' ``requires_grad`` cleared for the other two);
- loss on the assistant reply only (its text and ``<|im_end|>``; never the image tokens or the prompt): honing
  ``train_on: assistant``; TRL ``assistant_only_loss=True`` (the template's generation markers); the Trainer's
  collator masks everything before the last ``<|im_start|>assistant\\n`` and after the reply's ``<|im_end|>``;
- optimizer: fused AdamW, the same LR, betas, eps, no weight decay (the systems exclude different parameters
  from decay), clipping at 1.0, a constant schedule with no warm-up; 8 rows per step in one forward pass.

TRL's VLM mode takes a dataset with ``messages`` and ``images`` columns and processes each batch in its
``DataCollatorForVisionLanguageModeling``; it refuses ``packing`` and ``padding_free`` for vision data (not used
here: all three pad), and ``truncation_mode='keep_end'``.

The metric: the timed steps' rows (samples/s) and their non-padding tokens (the sum of each batch's
``attention_mask``, counted by wrapping each system's collate function: step s trains batch s) over the wall time
from the end of warm-up step W to the end of step W+N (each trainer's step-end callback). The mean loss is over
all W+N steps (same data, same model: the three should agree closely). Each measurement is a fresh subprocess
run alone (never two at once); the systems alternate order round by round and the median of the rounds is
reported. A system that fails is reported with its error and left out of the ratios.

    .venv/bin/python benchmarks/vl_sft_throughput.py [--rounds 3] [--steps 20] [--warmup 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from typing import Any

import common  # benchmarks/common.py: this folder is on sys.path when a script runs

MODEL_TYPE = "qwen2_vl"
BATCH = 8  # rows per step, one forward pass
SEED = 0
LR = 1e-3
BETAS = (0.9, 0.999)
MAX_LENGTH = 256  # rows are ~100 tokens: nothing is truncated


# --- shared assets ------------------------------------------------------------------------------------------
def prepare_assets(folder: str, samples: int) -> tuple[str, str]:
    """Write the model + processor folder and the OCR rows under ``folder``; their paths."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor
    from transformers.utils import logging as transformers_logging

    from honing.data.generated.ocr import write_ocr_set
    from honing.models.tiny_vl import build_tiny_processor, tiny_vl_config

    transformers_logging.disable_progress_bar()
    model_dir = build_tiny_processor(MODEL_TYPE, os.path.join(folder, "model"))
    tokenizer = AutoProcessor.from_pretrained(model_dir).tokenizer
    torch.manual_seed(SEED)
    config = tiny_vl_config(MODEL_TYPE, vocab_size=len(tokenizer))
    AutoModelForImageTextToText.from_config(config, attn_implementation="sdpa").save_pretrained(model_dir)
    rows = write_ocr_set(os.path.join(folder, "ocr"), samples=samples, seed=SEED)
    # TRL's collator puts a row's images before its first user text: every system gets that order
    image_first = os.path.join(os.path.dirname(rows), "rows-image-first.jsonl")
    with open(rows, encoding="utf-8") as source, open(image_first, "w", encoding="utf-8") as target:
        for line in source:
            row = json.loads(line)
            user = row["messages"][0]
            user["content"] = sorted(user["content"], key=lambda item: item["type"] == "text")
            target.write(json.dumps(row) + "\n")
    return model_dir, image_first


def read_rows(rows_path: str) -> list[dict[str, str]]:
    """Each OCR row as its image's path, the instruction and the reply."""
    out = []
    with open(rows_path, encoding="utf-8") as handle:
        for line in handle:
            user, assistant = json.loads(line)["messages"]
            image, text = sorted(user["content"], key=lambda item: item["type"] == "text")
            path = os.path.join(os.path.dirname(rows_path), image["content"])
            out.append({"image": path, "prompt": text["content"], "reply": assistant["content"]})
    return out


def load_model(model_dir: str) -> Any:
    """The shared initial model, fp32, sdpa, its vision tower frozen (as honing's ``model.freeze_vision``)."""
    import torch
    from transformers import AutoModelForImageTextToText

    from honing.models.vl_families import FAMILIES

    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa")
    frozen = FAMILIES[MODEL_TYPE].vision_modules
    for name, param in model.named_parameters():
        if any(name == prefix or name.startswith(prefix + ".") for prefix in frozen):
            param.requires_grad_(False)
    return model


def load_image(path: str) -> Any:
    """An image file as RGB (what honing's loader gives the processor)."""
    from PIL import Image

    with Image.open(path) as image:
        return image.convert("RGB")


class CountingCollate:
    """Wraps a collate function and records each batch's non-padding tokens (its attention mask's sum)."""

    def __init__(self, collate: Any):
        self.collate = collate
        self.tokens: list[int] = []

    def __call__(self, items: list[Any]) -> Any:
        batch = self.collate(items)
        self.tokens.append(int(batch["attention_mask"].sum()))
        return batch

    def timed_tokens(self, warmup: int, steps: int) -> int:
        """Tokens of steps warmup+1 .. warmup+steps (batch index = step - 1)."""
        if len(self.tokens) < warmup + steps:
            raise RuntimeError(f"only {len(self.tokens)} batches were collated, expected {warmup + steps}")
        return sum(self.tokens[warmup : warmup + steps])


def result(
    counter: CountingCollate, times: dict[int, float], warmup: int, steps: int, loss: float, trainable: int
) -> dict[str, float]:
    """What one measurement reports."""
    seconds = times[warmup + steps] - times[warmup]
    tokens = counter.timed_tokens(warmup, steps)
    return {
        "samples_per_s": steps * BATCH / seconds,
        "tokens_per_s": tokens / seconds,
        "real_tokens_per_step": tokens / steps,
        "mean_loss": loss,
        "trainable_params": trainable,
    }


def trainable_params(model: Any) -> int:
    """Parameters the optimizer updates."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def hf_arguments(folder: str, warmup: int, steps: int) -> dict[str, Any]:
    """``TrainingArguments`` shared by the Trainer and TRL: the same optimizer, order and bookkeeping."""
    return dict(
        output_dir=folder,
        per_device_train_batch_size=BATCH,
        max_steps=warmup + steps,
        learning_rate=LR,
        weight_decay=0.0,
        adam_beta1=BETAS[0],
        adam_beta2=BETAS[1],
        adam_epsilon=1e-8,
        max_grad_norm=1.0,
        lr_scheduler_type="constant",
        optim="adamw_torch_fused",
        train_sampling_strategy="sequential",
        bf16=False,
        fp16=False,
        use_cpu=True,
        logging_steps=10**6,
        save_strategy="no",
        eval_strategy="no",
        report_to=[],
        dataloader_num_workers=0,
        seed=SEED,
        disable_tqdm=True,
    )


def hf_timer(times: dict[int, float], warmup: int, steps: int) -> Any:
    """A transformers callback stamping the end of steps W and W+N."""
    from transformers import TrainerCallback

    class Timer(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step in (warmup, warmup + steps):
                times[state.global_step] = time.perf_counter()

    return Timer()


# --- honing -------------------------------------------------------------------------------------------------
def honing_config(folder: str, model_dir: str, rows: str, total_steps: int, threads: int) -> dict[str, Any]:
    """honing's ``vl_sft`` config at this benchmark's setting (also read by ``vl_sft_step_ops.py``)."""
    return {
        "method": "vl_sft",
        "trainer": {
            "save_folder": folder,
            "max_duration": f"{total_steps}steps",
            "seed": SEED,
            "precision": "fp32",
            "device": "cpu",
            "num_threads": threads,
        },
        "model": {"name_or_path": model_dir, "lora": None, "freeze_vision": True, "attn_implementation": "sdpa"},
        "data": {
            "train": {"sources": [{"path": rows}]},
            "seq_len": MAX_LENGTH,
            "global_batch_size": BATCH,
            "shuffle": False,
            "group_by_length": False,
        },
        "optim": {
            "lr": LR,
            "weight_decay": 0.0,
            "betas": list(BETAS),
            "eps": 1e-8,
            "grad_clip": 1.0,
            "fused": True,
        },
        "scheduler": {"name": "constant"},
        "callbacks": {
            "evaluator": {"enabled": False},
            "sample": {"enabled": False},
            "checkpointer": {"save_interval": 10**6},
        },
    }


def run_honing(model_dir: str, rows: str, warmup: int, steps: int, threads: int) -> dict[str, float]:
    """honing's ``vl_sft`` recipe from a config, as ``honing train`` runs it (its default callbacks, minus
    validation and samples), with a recipe subclass that adds the timer and the token counter."""
    from honing.config.loading import validate
    from honing.recipes.vl_sft import VLSFTRecipe
    from honing.train import Callback

    times: dict[int, float] = {}
    losses: list[float] = []

    class Timer(Callback):
        def on_step_end(self):
            if self.step in (warmup, warmup + steps):
                times[self.step] = time.perf_counter()

        def on_log(self, step: int, metrics: dict[str, float]) -> None:
            if "train/loss" in metrics:
                losses.append(metrics["train/loss"])

    class BenchmarkRecipe(VLSFTRecipe):
        def build_data(self, assets, model=None):
            data = super().build_data(assets, model)
            loader = data.train_loader
            loader.collate_fn = self.counter = CountingCollate(loader.collate_fn)
            return data

        def build_callbacks(self, parts):
            return {**super().build_callbacks(parts), "benchmark_timer": Timer()}

    with tempfile.TemporaryDirectory() as folder:
        config = honing_config(folder, model_dir, rows, warmup + steps, threads)
        recipe = BenchmarkRecipe(validate(config))
        recipe.run()
        trainable = trainable_params(recipe.model)
    return result(recipe.counter, times, warmup, steps, statistics.fmean(losses), trainable)


# --- transformers Trainer -----------------------------------------------------------------------------------
class VLMCollator:
    """A standard hand-written VLM collator: chat template, the processor on the batch's images and texts,
    labels masked to the assistant reply (and its ``<|im_end|>``)."""

    def __init__(self, processor: Any):
        self.processor = processor
        tokenizer = processor.tokenizer
        self.header = tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)
        self.end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def __call__(self, rows: list[dict[str, str]]) -> dict[str, Any]:
        texts, images = [], []
        for row in rows:
            messages = [
                {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": row["prompt"]}]},
                {"role": "assistant", "content": [{"type": "text", "text": row["reply"]}]},
            ]
            texts.append(self.processor.apply_chat_template(messages, tokenize=False))
            images.append([load_image(row["image"])])
        batch = dict(self.processor(text=texts, images=images, padding=True, return_tensors="pt"))
        labels = batch["input_ids"].clone().fill_(-100)
        for i, ids in enumerate(batch["input_ids"].tolist()):
            start = self._reply_start(ids)
            stop = ids.index(self.end, start) + 1
            labels[i, start:stop] = batch["input_ids"][i, start:stop]
        batch["labels"] = labels
        return batch

    def _reply_start(self, ids: list[int]) -> int:
        width = len(self.header)
        for start in range(len(ids) - width, -1, -1):
            if ids[start : start + width] == self.header:
                return start + width
        raise ValueError("no assistant turn in the row")


def run_trainer(model_dir: str, rows: str, warmup: int, steps: int, threads: int) -> dict[str, float]:
    """The transformers ``Trainer`` over a list of rows with ``VLMCollator``; no eval, no saves."""
    from transformers import AutoProcessor, Trainer, TrainingArguments

    times: dict[int, float] = {}
    processor = AutoProcessor.from_pretrained(model_dir)
    model = load_model(model_dir)
    counter = CountingCollate(VLMCollator(processor))
    with tempfile.TemporaryDirectory() as folder:
        args = TrainingArguments(**hf_arguments(folder, warmup, steps), remove_unused_columns=False)
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=read_rows(rows),
            data_collator=counter,
            callbacks=[hf_timer(times, warmup, steps)],
        )
        output = trainer.train()
    return result(counter, times, warmup, steps, output.training_loss, trainable_params(model))


# --- TRL ----------------------------------------------------------------------------------------------------
def run_trl(model_dir: str, rows: str, warmup: int, steps: int, threads: int) -> dict[str, float]:
    """TRL's ``SFTTrainer`` in its VLM mode: a ``messages`` + ``images`` dataset (images stored as PNG bytes,
    decoded per row), its ``DataCollatorForVisionLanguageModeling``; no eval, no saves."""
    import datasets
    from transformers import AutoProcessor
    from trl import SFTConfig, SFTTrainer

    datasets.disable_progress_bars()
    times: dict[int, float] = {}
    processor = AutoProcessor.from_pretrained(model_dir)
    model = load_model(model_dir)
    records = [
        {
            "messages": [{"role": "user", "content": row["prompt"]}, {"role": "assistant", "content": row["reply"]}],
            "images": [row["image"]],
        }
        for row in read_rows(rows)
    ]
    # The Image feature reads the files into the dataset; TRL places the images before the first user text.
    features = datasets.Features(
        {
            "messages": [{"role": datasets.Value("string"), "content": datasets.Value("string")}],
            "images": datasets.List(datasets.Image(mode="RGB")),
        }
    )
    dataset = datasets.Dataset.from_list(records, features=features)
    with tempfile.TemporaryDirectory() as folder:
        args = SFTConfig(
            **hf_arguments(folder, warmup, steps),
            max_length=MAX_LENGTH,
            assistant_only_loss=True,
            packing=False,
            padding_free=False,
            activation_checkpointing=False,
        )
        trainer = SFTTrainer(
            model=model,
            args=args,
            train_dataset=dataset,
            processing_class=processor,
            callbacks=[hf_timer(times, warmup, steps)],
        )
        counter = CountingCollate(trainer.data_collator)
        trainer.data_collator = counter
        output = trainer.train()
    return result(counter, times, warmup, steps, output.training_loss, trainable_params(model))


SYSTEMS = {
    "honing": run_honing,
    "transformers Trainer": run_trainer,
    "TRL SFTTrainer": run_trl,
}


# --- driver -------------------------------------------------------------------------------------------------
def measure_in_subprocess(system: str, model_dir: str, rows: str, args: argparse.Namespace) -> dict[str, float]:
    """Run one system in a fresh interpreter with the benchmark's thread count; return its measurement."""
    return common.measure_in_subprocess(
        "vl_sft_throughput",
        f"b.SYSTEMS[{system!r}]({model_dir!r}, {rows!r}, {args.warmup}, {args.steps}, {args.threads})",
        threads=args.threads,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if args.rounds < 1 or args.steps < 1 or args.warmup < 1:
        sys.exit("--rounds, --steps and --warmup must be at least 1 (the timer starts at the end of a warm-up step)")

    results: dict[str, list[dict[str, float]]] = {name: [] for name in SYSTEMS}
    failures: dict[str, str] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="vl_sft_throughput-") as folder:
        model_dir, rows = prepare_assets(folder, samples=(args.warmup + args.steps) * BATCH)
        for round_index in range(args.rounds):
            order = list(SYSTEMS) if round_index % 2 == 0 else list(reversed(SYSTEMS))
            for system in order:
                if system in failures:
                    continue
                try:
                    measured = measure_in_subprocess(system, model_dir, rows, args)
                except RuntimeError as error:
                    failures[system] = str(error)
                    print(f"round {round_index + 1} {system:20s} FAILED: {error}", flush=True)
                    continue
                results[system].append(measured)
                print(
                    f"round {round_index + 1} {system:20s} {measured['samples_per_s']:8.2f} samples/s "
                    f"{measured['tokens_per_s']:10,.0f} real tokens/s ({measured['real_tokens_per_step']:,.0f} "
                    f"per step), mean loss {measured['mean_loss']:.4f}",
                    flush=True,
                )

    median = {
        name: {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        for name, runs in results.items()
        if runs
    }
    print(
        f"\n{platform.processor() or platform.machine()}, {args.threads} threads, fp32, tiny {MODEL_TYPE} (full "
        f"fine-tuning, vision tower frozen), {BATCH} rows per step, {args.steps} timed steps after {args.warmup} "
        f"warm-up, median of {args.rounds} rounds ({time.perf_counter() - started:.0f} s in all)"
    )
    print(f"{'system':20s} {'samples/s':>10s} {'real tokens/s':>14s} {'tokens/step':>12s} {'mean loss':>10s} trainable")
    for name in SYSTEMS:
        if name not in median:
            print(f"{name:20s} failed: {failures[name]}")
            continue
        values = median[name]
        print(
            f"{name:20s} {values['samples_per_s']:10.2f} {values['tokens_per_s']:14,.0f} "
            f"{values['real_tokens_per_step']:12,.0f} {values['mean_loss']:10.4f} {values['trainable_params']:,.0f}"
        )
    ratios: dict[str, float | None] = {}
    for other, target in (("transformers Trainer", 1.0), ("TRL SFTTrainer", 1.5)):
        value = None
        if {"honing", other} <= median.keys():  # the same batches: the tokens/s ratio is the same
            value = median["honing"]["samples_per_s"] / median[other]["samples_per_s"]
        ratios[f"honing / {other}"] = value
        shown = "n/a" if value is None else f"{value:.3f}"
        print(f"honing / {other:20s} = {shown} samples/s (target >= {target})")
    print(
        json.dumps({"median": median, "per_round": results, "ratios": ratios, "failures": failures, "args": vars(args)})
    )


if __name__ == "__main__":
    main()
