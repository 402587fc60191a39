"""``callbacks.generation_eval.metrics``: which scores the generation eval records, from the GRPO reward registry
(the same functions, the same signature) or any ``package.module:function``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from honing.rl import RewardScorer, resolve_reward

#: the metrics the generation eval computes itself
OWN_METRICS = ("exact_match", "cer")
KEY = "callbacks.generation_eval.metrics"

ScoreFn = Callable[[list[Any], list[str], dict[str, list[str]]], dict[str, list[float]]]


def metric_name(name: str) -> str:
    """``eval/<name>``'s name: a registered name as it is, an import path's function name."""
    return name.rpartition(":")[2]


def generation_metrics(method: str, metrics: list[str] | None) -> tuple[bool, ScoreFn | None]:
    """Whether to compute the character error rate, and the function scoring answers with the other metrics
    (None when there are none). ``metrics`` None: the method's defaults (cer for vl_sft and grpo)."""
    if metrics is None:
        # transcription is what VL tasks check; GRPO's near misses are what its partial rewards see
        return method in ("vl_sft", "grpo"), None
    others = [name for name in dict.fromkeys(metrics) if name not in OWN_METRICS]
    if not others:
        return "cer" in metrics, None
    for name in others:  # an unknown name or a failed import stops the run now, naming the list item
        resolve_reward(name, key=f"{KEY}[{metrics.index(name)}]")
    scorer = RewardScorer([(name, 1.0) for name in others], key=KEY)
    names = [metric_name(name) for name in others]

    def score(prompts: list[Any], answers: list[str], columns: dict[str, list[str]]) -> dict[str, list[float]]:
        table = scorer.score(prompts, answers, columns)  # answers × metrics, NaN where one does not apply
        return {name: table[:, index].tolist() for index, name in enumerate(names)}

    return "cer" in metrics, score
