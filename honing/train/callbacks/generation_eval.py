"""Exact-match accuracy of generated answers on held-out prompts: did the model learn the task?"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch

from honing.distributed import get_rank, get_world_size, is_rank0
from honing.models.parallel import is_sharded
from honing.train.callbacks.base import Callback
from honing.train.callbacks.evaluator import evaluation_cut
from honing.train.callbacks.order import PRIORITY
from honing.train.metrics import ReduceType

log = logging.getLogger(__name__)


class GenerationEvalCallback(Callback):
    """Answers each ``(prompt, expected)`` with ``answer_fn(prompt) -> text`` (greedy) before training,
    every ``interval`` steps, and at the end; records ``eval/exact_match`` (and ``eval/cer``, the mean
    character error rate, with ``character_error_rate``) and appends the answers to
    ``SAVE_FOLDER/generation_eval.jsonl``.

    ``prompt`` is whatever ``answer_fn`` takes (e.g. the conversation without its last assistant turn).
    Under data parallelism (DDP, each rank the whole model) the ranks share the prompts out and gather the answers;
    a model sharded across ranks (FSDP2, tensor / expert / context parallel) has every rank answer every prompt,
    as each forward needs them all. ``score_fn(prompts,
    answers, {"answer": expected})`` gives more metrics (name → one float or NaN per answer, e.g. the reward
    registry's scorers): each is recorded as ``<name>/<metric>``, the mean of its numbers, and kept per answer.
    """

    priority = PRIORITY["generation_eval"]

    def __init__(
        self,
        answer_fn: Callable[[Any], str],
        examples: Sequence[tuple[Any, str]],
        *,
        interval: int | None = None,
        printer: Callable[[str], Any] = print,
        name: str = "eval",
        character_error_rate: bool = False,
        score_fn: Callable[[list[Any], list[str], dict[str, list[str]]], dict[str, list[float]]] | None = None,
    ):
        self.answer_fn = answer_fn
        self.examples = list(examples)
        self.interval = interval
        self.printer = printer
        self.name = name
        self.character_error_rate = character_error_rate
        self.score_fn = score_fn
        self.history: list[tuple[int, float]] = []

    def on_train_begin(self) -> None:
        self.evaluate(label="before training" if self.step == 0 else f"at step {self.step} (resumed)")

    def on_step_end(self) -> None:
        if self.trainer.is_last_step:
            self.evaluate(label=f"after training (step {self.step})")
        elif self.interval and self.step % self.interval == 0:
            self.evaluate(label=f"at step {self.step}")

    def on_train_end(self) -> None:  # a canceled run
        if not self.history or self.history[-1][0] != self.step:
            self.evaluate(label=f"after training (step {self.step})")

    @torch.no_grad()
    def evaluate(self, *, label: str) -> float:
        """Answer every prompt now; record and print the exact-match accuracy (NaN, nothing recorded, when a signal
        asked the run to end before every prompt was answered)."""
        model = self.trainer.train_module.model
        was_training = model.training
        split = self._split_over_ranks()
        rank, ranks = (get_rank(), get_world_size()) if split else (0, 1)
        if split and not self.history:
            log.info("generation evaluation: %d prompts shared out over %d ranks", len(self.examples), ranks)
        answered: list[tuple[int, dict[str, Any]]] = []  # (the example's index, its row)
        try:
            with torch.random.fork_rng(devices=[]):  # generation must not move the training RNG
                # every rank takes the same number of turns (one prompt each, or none for the last), so the cut's
                # check, an all-reduce with several ranks, comes at the same turn on all of them
                for turn in range(-(-len(self.examples) // ranks)):
                    if evaluation_cut(self.trainer, f"the generation evaluation {label}", len(answered), "prompts"):
                        return math.nan
                    index = rank + turn * ranks
                    if index >= len(self.examples):
                        continue
                    prompt, expected = self.examples[index]
                    answer = self.answer_fn(prompt).strip()
                    row = {"step": self.step, "expected": expected, "answer": answer}
                    row["correct"] = answer == expected.strip()
                    if self.character_error_rate:
                        row["cer"] = character_error_rate(answer, expected.strip())
                    answered.append((index, row))
        finally:
            model.train(was_training)
        if split:  # every rank gets every row, in the examples' order
            parts: list[list[tuple[int, dict[str, Any]]] | None] = [None] * ranks
            torch.distributed.all_gather_object(parts, answered)
            answered = sorted((pair for part in parts for pair in part or ()), key=lambda pair: pair[0])
        rows = [row for _, row in answered]
        scores = self._scores(rows)
        correct = sum(row["correct"] for row in rows)
        accuracy = correct / max(len(rows), 1)
        self.history.append((self.step, accuracy))
        self.trainer.record_metric(f"{self.name}/exact_match", accuracy, ReduceType.max)
        cer = ""
        if self.character_error_rate and rows:
            mean_cer = sum(row["cer"] for row in rows) / len(rows)
            self.trainer.record_metric(f"{self.name}/cer", mean_cer, ReduceType.max)
            cer = f", character error rate {mean_cer:.3f}"
        for metric, mean in scores.items():
            self.trainer.record_metric(f"{self.name}/{metric}", mean, ReduceType.max)
            cer += f", {metric} {mean:.3f}"
        if is_rank0():
            path = os.path.join(self.trainer.work_folder, "generation_eval.jsonl")
            os.makedirs(self.trainer.work_folder, exist_ok=True)
            with open(path, "a", encoding="utf-8") as handle:
                handle.writelines(json.dumps(row) + "\n" for row in rows)
            self.trainer.persist_working_file(path)  # uploaded when the save folder is remote
            shown = rows[0] if rows else None
            example = f" (e.g. expected {shown['expected']!r}, got {shown['answer']!r})" if shown else ""
            self.printer(f"held-out exact match {label}: {accuracy:.1%} ({correct}/{len(rows)}){cer}{example}")
        return accuracy

    def _split_over_ranks(self) -> bool:
        """Whether the ranks share the prompts out: several ranks, each holding the whole model (data parallel
        only). A model sharded over ranks (FSDP2, tensor, expert or context parallel) needs every rank in each
        forward, so there every rank answers every prompt."""
        if get_world_size() == 1:
            return False
        module = self.trainer.train_module
        dims = getattr(module, "parallel_dims", None)
        if dims is None or any(getattr(dims, axis, 1) > 1 for axis in ("cp", "tp", "ep")):
            return False
        return not is_sharded(module.model)

    def _scores(self, rows: list[dict[str, Any]]) -> dict[str, float]:
        """Each extra metric's mean over the answers it applies to (NaN: not applicable); per answer into ``rows``."""
        if self.score_fn is None or not rows:
            return {}
        prompts = [prompt for prompt, _ in self.examples]
        values = self.score_fn(prompts, [row["answer"] for row in rows], {"answer": [r["expected"] for r in rows]})
        means = {}
        for metric, numbers in values.items():
            for row, number in zip(rows, numbers):
                row[metric] = None if math.isnan(number) else number
            applicable = [number for number in numbers if not math.isnan(number)]
            means[metric] = sum(applicable) / len(applicable) if applicable else math.nan
        return means


def character_error_rate(answer: str, expected: str) -> float:
    """Levenshtein distance from ``answer`` to ``expected`` over ``expected``'s length (OCR's CER; may exceed 1)."""
    previous = list(range(len(answer) + 1))
    for i, want in enumerate(expected, start=1):
        current = [i]
        for j, got in enumerate(answer, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (want != got)))
        previous = current
    return previous[-1] / max(len(expected), 1)
