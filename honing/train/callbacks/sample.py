"""Print and log text generated from fixed prompts every N steps and at the end of training."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import Any

import torch

from honing.distributed import is_rank0
from honing.train.callbacks.base import Callback
from honing.train.callbacks.order import PRIORITY


@dataclass(eq=False)
class TextSampleCallback(Callback):
    """Generates from ``prompts`` with ``generate_fn(prompt) -> text`` every ``interval`` steps (None:
    only at the end) and when training ends.

    Every rank generates (FSDP2 needs all of them in each forward), inside ``torch.random.fork_rng``
    so sampling never changes the training RNG stream. Rank 0 appends the samples to
    ``SAVE_FOLDER/samples.jsonl``, shows them on the console and hands them to the trackers
    (``Trainer.log_samples``: a W&B table, TensorBoard text).
    """

    priority = PRIORITY["sample"]

    generate_fn: Callable[[str], str]
    _: KW_ONLY
    prompts: list[str]
    interval: int | None = None
    printer: Callable[[str], Any] = print

    def __post_init__(self) -> None:
        if self.interval is not None and self.interval < 1:
            raise ValueError(f"interval must be at least 1, got {self.interval}")
        self.samples: list[dict[str, Any]] = []

    def on_step_end(self) -> None:
        # the last step samples once, in on_train_end
        if self.interval and self.step % self.interval == 0 and not self.trainer.is_last_step:
            self.sample()

    def on_train_end(self) -> None:
        self.sample()

    def sample(self) -> None:
        """Generate from every prompt now, and write, print and log the samples."""
        with torch.random.fork_rng(devices=[]):
            self.samples = [{"step": self.step, "prompt": p, "text": self.generate_fn(p)} for p in self.prompts]
        if not is_rank0():
            return
        path = os.path.join(self.trainer.work_folder, "samples.jsonl")
        os.makedirs(self.trainer.work_folder, exist_ok=True)
        with open(path, "a", encoding="utf-8") as handle:
            for sample in self.samples:
                handle.write(json.dumps(sample) + "\n")
        self.trainer.persist_working_file(path)  # uploaded when the save folder is remote
        for sample in self.samples:
            self.printer(f"--- sample (step {sample['step']}) ---\n{sample['prompt']}{sample['text']}")
        self.trainer.log_samples("samples", [{"prompt": s["prompt"], "text": s["text"]} for s in self.samples])
