"""Print and log text generated from fixed prompts at the end of training."""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Callable

import torch

from honing.distributed import is_rank0
from honing.train.callbacks.base import Callback

log = logging.getLogger(__name__)


class TextSampleCallback(Callback):
    """Generates from ``prompts`` with ``generate_fn(prompt) -> text`` when training ends.

    Runs inside ``torch.random.fork_rng`` so sampling never changes the training RNG stream.
    Samples are appended to ``SAVE_FOLDER/samples.jsonl`` and shown on the console.
    """

    priority = -70  # after the final checkpoint and export, before the console summary

    def __init__(self, generate_fn: Callable[[str], str], *, prompts: list[str], printer: Callable[[str], Any] = print):
        self.generate_fn = generate_fn
        self.prompts = prompts
        self.printer = printer
        self.samples: list[dict[str, Any]] = []

    def on_train_end(self) -> None:
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
