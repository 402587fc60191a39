"""``model.lean_forward`` on and off, interleaved in one process: a training step's forward + backward of the same
model, transformers' forwards against honing's lean ones, step by step in alternating order, so that the drifts of
a shared machine fall on both alike; the medians, their ratio, and a check that logits and gradients are equal.

Two models: the tiny Qwen2-VL of ``vl_sft_throughput.py`` on a batch of its shape (8 rows of one 140 x 28 image
and a short instruction, right-padded, the 4-D sdpa mask and rope positions as honing's collator passes them,
vision tower frozen) and its vision tower alone; and a 4-layer Llama-shaped decoder (hidden 128, grouped
key/value heads) on 8 right-padded rows of 96 tokens, GRPO's training forward's shape.

    .venv/bin/python benchmarks/lean_forward.py [--steps 200] [--threads 2]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
from collections.abc import Callable

import torch


def vl_case(folder: str) -> tuple[torch.nn.Module, dict]:
    """The benchmark's tiny Qwen2-VL (vision tower frozen) and a batch of 8 one-image rows."""
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from honing.data.vision.causal_masks import causal_padding_mask
    from honing.models.tiny_vl import build_tiny_processor, tiny_vl_config, tiny_vocab_size

    torch.manual_seed(0)
    config = tiny_vl_config("qwen2_vl", vocab_size=tiny_vocab_size("qwen2_vl"))
    model = AutoModelForImageTextToText.from_config(config, attn_implementation="sdpa")
    for name, parameter in model.named_parameters():
        if name.startswith(("model.visual.patch_embed", "model.visual.blocks")):
            parameter.requires_grad_(False)
    processor = AutoProcessor.from_pretrained(build_tiny_processor("qwen2_vl", folder))
    texts, images = [], []
    for row in range(8):
        chat = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Transcribe." + "x" * row}]}]
        texts.append(processor.apply_chat_template(chat, add_generation_prompt=True) + "ABCDE" * (1 + row % 3))
        images.append(Image.new("RGB", (140, 28), (30 * row, 90, 200)))
    processor.tokenizer.padding_side = "right"
    batch = dict(processor(text=texts, images=images, return_tensors="pt", padding=True))
    mask = batch["attention_mask"]
    batch["position_ids"], _ = model.model.get_rope_index(
        batch["input_ids"], batch["mm_token_type_ids"], batch["image_grid_thw"], attention_mask=mask
    )
    batch["attention_mask"] = causal_padding_mask(mask)
    return model, batch


def text_case() -> tuple[torch.nn.Module, dict]:
    """A 4-layer Llama-shaped decoder and 8 right-padded rows of 96 tokens."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    config = AutoConfig.for_model(
        "qwen2",
        vocab_size=258,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    ids = torch.randint(3, 258, (8, 96), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    for row in range(8):
        mask[row, 60 + 4 * row :] = 0
    return model, {"input_ids": ids, "attention_mask": mask}


def training_step(model: torch.nn.Module, batch: dict) -> Callable[[], tuple[torch.Tensor, list[torch.Tensor]]]:
    """One forward + backward of a loss over the logits; returns the logits and the gradients."""

    def step() -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        logits = model(**batch, use_cache=False).logits
        logits.float().logsumexp(-1).mean().backward()
        return logits.detach(), [p.grad for p in model.parameters() if p.grad is not None]

    return step


def interleaved(runs: dict[str, Callable[[], object]], steps: int, warmup: int = 20) -> dict[str, float]:
    """Each run's median seconds over ``steps`` calls, the runs called in turn, their order alternating."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for index in range(warmup + steps):
        for name in names if index % 2 else reversed(names):
            start = time.perf_counter()
            runs[name]()
            if index >= warmup:
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def compare(label: str, model: torch.nn.Module, batch: dict, steps: int) -> None:
    from honing.models.lean_training_forward import use_lean_forwards

    lean = copy.deepcopy(model)
    taken = use_lean_forwards(lean)
    theirs, ours = training_step(model, batch), training_step(lean, batch)
    (logits, grads), (lean_logits, lean_grads) = theirs(), ours()
    same = torch.equal(logits, lean_logits) and all(torch.equal(a, b) for a, b in zip(grads, lean_grads, strict=True))
    medians = interleaved({"transformers": theirs, "lean": ours}, steps)
    print(
        f"{label}: transformers {medians['transformers'] * 1e3:.3f} ms, lean {medians['lean'] * 1e3:.3f} ms, "
        f"ratio {medians['transformers'] / medians['lean']:.3f} | {len(taken)} modules lean | "
        f"logits and gradients {'bit-identical' if same else 'DIFFER'}"
    )
    if hasattr(model, "model") and hasattr(model.model, "visual"):
        pixels, grid = batch["pixel_values"], batch["image_grid_thw"]
        towers = {"transformers": model.model.visual, "lean": lean.model.visual}
        with torch.no_grad():
            medians = interleaved(
                {name: lambda t=tower: t(pixels, grid_thw=grid) for name, tower in towers.items()}, steps
            )
        print(
            f"{label} vision tower (no grad): transformers {medians['transformers'] * 1e3:.3f} ms, "
            f"lean {medians['lean'] * 1e3:.3f} ms, ratio {medians['transformers'] / medians['lean']:.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    with tempfile.TemporaryDirectory() as folder:
        model, batch = vl_case(folder)
    print(f"{args.threads} threads, {args.steps} interleaved steps each, medians")
    compare("tiny Qwen2-VL, 8 rows", model, batch, args.steps)
    model, batch = text_case()
    compare("Qwen2-shaped 128 x 4 layers, 8 x 96 tokens", model, batch, args.steps)


if __name__ == "__main__":
    main()
