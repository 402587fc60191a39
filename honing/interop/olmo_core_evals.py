"""OLMo-core's ``TrainerConfig.with_recommended_evals`` at honing's edge: the two evaluator callbacks it adds.

OLMo-core adds a ``downstream_evaluator`` (its in-loop benchmarks: a named task set of its own evaluation package)
and an ``lm_evaluator`` (the loss on its ``v3_small_ppl_validation`` mix, read from the named cluster's data root).
Neither that package nor that mix nor the clusters exist outside AI2, so honing's nearest form is:

- ``downstream_evaluator``: honing's lm-evaluation-harness callback on the task set's benchmarks under lm-eval's
  names (``TASK_GROUPS``: OLMo-core's set names; a task may also be an lm-eval task YAML file, offline), every
  ``eval_interval`` steps and at the end (OLMo-core's ``eval_on_finish=True``), in ``eval/harness/<task>/...``;
- ``lm_evaluator``: honing's evaluator over the validation documents found under ``cluster`` (a local folder here,
  not a cluster name): each ``.txt`` file, or each ``.jsonl`` row's ``text``, tokenized with ``tokenizer`` and cut
  into rows of ``sequence_length`` tokens, the last padded (OLMo-core's padded fixed-length rows), in ``eval/...``.

``lazy_load=False`` reads the tasks and the documents when training starts (a missing task fails before the first
step, as OLMo-core loads its data up front); ``True`` at the first evaluation.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from honing.distributed import get_rank, get_world_size, is_rank0
from honing.errors import ConfigError
from honing.evaluate.harness import HarnessSettings, flat_metrics, run_harness, task_manager, task_results
from honing.losses import IGNORE_INDEX
from honing.train.callbacks.base import Callback
from honing.train.callbacks.evaluator import EvaluatorCallback
from honing.train.callbacks.harness_eval import HarnessEvalCallback

# OLMo-core's task-set names (olmo_core.eval.task_groups) -> the same benchmarks under lm-evaluation-harness's names,
# each with lm-eval's own few-shot count; OLMo-core's ranked-classification / BPB variants and its tasks lm-eval lacks
# (basic_skills, copycolors, lab_bench, sciriff, jeopardy, naturalqs, multilingual MBPP) have no counterpart.
# A script may add its own sets, as it could to OLMo-core's TASK_GROUPS.
_OLMES_CORE = ["arc_challenge", "arc_easy", "hellaswag", "winogrande", "commonsense_qa", "piqa", "social_iqa"]
_MMLU = ["mmlu_stem", "mmlu_humanities", "mmlu_social_sciences", "mmlu_other"]
_GENERATION = ["gsm8k", "minerva_math", "humaneval", "mbpp"]
_SMALL_COMPUTE = [*_OLMES_CORE, *_MMLU, *_GENERATION, "coqa", "drop", "lambada_openai", "nq_open", "squadv2"]
_LARGE_COMPUTE = [*_OLMES_CORE, *_MMLU, *_GENERATION]
TASK_GROUPS: dict[str, list[str]] = {
    "full__small_compute": _SMALL_COMPUTE,
    "full__large_compute": _LARGE_COMPUTE,
    "full": sorted(set(_SMALL_COMPUTE + _LARGE_COMPUTE + ["medmcqa", "medqa_4options"])),
    "fast": ["arc_challenge", "arc_easy", "hellaswag", *_MMLU],
}


def recommended_eval_callbacks(
    tokenizer: Any, sequence_length: int, cluster: str, task_set: str, eval_interval: int, lazy_load: bool
) -> dict[str, Callback]:
    """The ``downstream_evaluator`` and ``lm_evaluator`` callbacks ``with_recommended_evals`` adds (module doc), with
    its arguments (their defaults are OLMo-core's, on the method)."""
    try:
        tasks = sorted(TASK_GROUPS[task_set])
    except KeyError:
        raise ConfigError(
            f"with_recommended_evals: task set not recognized: {task_set!r}; give one of {sorted(TASK_GROUPS)} "
            "(or add yours to honing.interop.olmo_core_evals.TASK_GROUPS)"
        ) from None
    if not os.path.isdir(cluster):
        raise ConfigError(
            f"with_recommended_evals: cluster={cluster!r} is no folder; honing has no clusters: give the local "
            "folder of the validation documents (.txt files or .jsonl rows with `text`)"
        )
    settings = HarnessSettings(tasks=tuple(tasks), key=f"with_recommended_evals(task_set={task_set!r})")
    return {
        "downstream_evaluator": DownstreamEvaluator(settings, tokenizer, eval_interval=eval_interval, lazy=lazy_load),
        "lm_evaluator": LMEvaluator(
            lambda: validation_rows(cluster, tokenizer, sequence_length),
            interval=eval_interval,
            lazy=lazy_load,
        ),
    }


class DownstreamEvaluator(HarnessEvalCallback):
    """lm-eval on the train module's model with the given tokenizer, at the chosen steps and at the end."""

    def __init__(self, settings: HarnessSettings, tokenizer: Any, *, eval_interval: int, lazy: bool):
        super().__init__(self._evaluate, interval=eval_interval)
        self.settings = settings
        self.tokenizer = tokenizer
        self.lazy = lazy

    def on_train_begin(self) -> None:
        if not self.lazy:
            task_manager(self.settings)  # an unknown task or a missing task file fails before the first step

    def _evaluate(self, step: int) -> dict[str, float] | None:
        from honing.run.harness_eval import evaluation_model  # the merged / gathered model, as callbacks.harness_eval

        module = self.trainer.train_module
        device = getattr(module, "device", None) or next(module.model.parameters()).device
        with evaluation_model(module.model, device) as model:
            if model is None or not is_rank0():
                return None
            return flat_metrics(task_results(run_harness(model, self.tokenizer, self.settings)))


class LMEvaluator(EvaluatorCallback):
    """The validation loss over rows made when training starts (or, lazily, at the first evaluation)."""

    def __init__(self, make_rows: Callable[[], list[dict[str, torch.Tensor]]], *, interval: int, lazy: bool):
        super().__init__(batches=(), interval=interval)
        self.make_rows = make_rows
        self.lazy = lazy
        self.rows: list[dict[str, torch.Tensor]] | None = None

    def on_train_begin(self) -> None:
        if not self.lazy:
            self._load()

    def evaluate(self) -> dict[str, float]:
        """Evaluate now (the rows made first if they are not yet)."""
        self._load()
        return super().evaluate()

    def _load(self) -> None:
        if self.rows is None:
            self.rows = self.make_rows()
            size = getattr(self.trainer.train_module, "micro_batch_size", None) or 8
            # each rank its own rows (the evaluator adds the sums over ranks)
            self.batches = list(_batches(self.rows[get_rank() :: get_world_size()], size))


def _batches(rows: list[dict[str, torch.Tensor]], size: int) -> Iterator[dict[str, torch.Tensor]]:
    for start in range(0, len(rows), size):
        chunk = rows[start : start + size]
        yield {key: torch.stack([row[key] for row in chunk]) for key in chunk[0]}


def validation_rows(folder: str, tokenizer: Any, sequence_length: int) -> list[dict[str, torch.Tensor]]:
    """Every document under ``folder`` (sorted paths) as rows of ``sequence_length`` tokens: a document's tokens
    and an end-of-text token cut in order, the last row padded with labels ignored."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id or 0
    rows = []
    for text in _documents(folder):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if tokenizer.eos_token_id is not None:
            ids = [*ids, tokenizer.eos_token_id]
        for start in range(0, len(ids), sequence_length):
            piece = ids[start : start + sequence_length]
            if len(piece) < 2:  # no next-token target
                continue
            padding = sequence_length - len(piece)
            input_ids = torch.tensor(piece + [pad] * padding)
            labels = torch.tensor(piece + [IGNORE_INDEX] * padding)
            rows.append({"input_ids": input_ids, "labels": labels})
    if not rows:
        raise ConfigError(f"with_recommended_evals: no validation documents (.txt, .jsonl with `text`) under {folder}")
    return rows


def _documents(folder: str) -> Iterable[str]:
    for root, _, files in sorted(os.walk(folder)):
        for name in sorted(files):
            path = os.path.join(root, name)
            if name.endswith(".txt"):
                with open(path, encoding="utf-8") as handle:
                    yield handle.read()
            elif name.endswith(".jsonl"):
                with open(path, encoding="utf-8") as handle:
                    for line in handle:
                        if line.strip():
                            yield json.loads(line)["text"]
