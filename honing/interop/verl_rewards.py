"""verl's reward signature and row format, for Oumi's ``VERL_GRPO`` configs and verl users.

A verl reward is ``compute_score(data_source, solution_str, ground_truth, extra_info=None) -> float`` (or a dict
with a ``"score"``), called once per completion; a verl row is ``{"prompt": [messages], "data_source": ...,
"reward_model": {"ground_truth": ...}, "extra_info": {...}}``. honing reads such a row as a prompt row (its other
keys become columns), and ``verl_reward`` turns a ``compute_score`` into honing's batch reward
``f(prompts, completions, **columns)`` that reads those columns.

Named as ``verl:NAME`` (a verl built-in below) or ``verl:package.module:function``; a function imported by path
whose parameters include ``solution_str`` and ``ground_truth`` is recognised as verl's without the prefix. Both reach
``honing.rl.rewards`` through ``honing.extensions`` (``resolve`` as the ``verl`` scheme, ``adapt`` as an adapter),
registered by ``honing.interop``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from honing.errors import ConfigError, DataError
from honing.rl.builtin_rewards import completion_text, countdown_reward, gsm8k_answer, gsm8k_ground_truth
from honing.rl.imports import import_callable
from honing.rl.math_rewards import geo3k_score as geometry3k_score

SCHEME = "verl"
ComputeScore = Callable[..., float | Mapping[str, float]]
BatchReward = Callable[..., list[float]]


def countdown_score(
    data_source: str | None, solution_str: str, ground_truth: Mapping[str, Any], extra_info: object = None
) -> float:
    """Countdown with verl's ground truth ``{"numbers": [...], "target": N}`` (honing's ``countdown`` rules)."""
    return countdown_reward(solution_str, float(ground_truth["target"]), ground_truth["numbers"])


def gsm8k_score(data_source: str | None, solution_str: str, ground_truth: object, extra_info: object = None) -> float:
    """GSM8K with verl's strict ``#### N`` extraction against the ground-truth number."""
    found = gsm8k_answer(solution_str, "strict")
    return 1.0 if found is not None and found == gsm8k_ground_truth(ground_truth) else 0.0


def geo3k_score(data_source: str | None, solution_str: str, ground_truth: object, extra_info: object = None) -> float:
    """Geometry3K as verl scores it (``verl.utils.reward_score.geo3k``: mathruler's grade of the last ``\\boxed{}``,
    0.9, and the ``<think>`` format, 0.1)."""
    return geometry3k_score(solution_str, ground_truth)


#: verl-signature built-ins, by the names Oumi registers them under (geo3k: verl's module name)
VERL_SCORES: dict[str, ComputeScore] = {"countdown": countdown_score, "gsm8k": gsm8k_score, "geo3k": geo3k_score}


def is_verl_signature(fn: Callable[..., object]) -> bool:
    """True when ``fn`` takes verl's ``solution_str`` and ``ground_truth`` parameters."""
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "solution_str" in parameters and "ground_truth" in parameters


def verl_reward(compute_score: ComputeScore, name: str) -> BatchReward:
    """honing's batch reward calling verl's ``compute_score`` per completion with the row's verl columns."""

    def reward(
        prompts: Sequence[object],
        completions: Sequence[object],
        reward_model: Sequence[object] | None = None,
        data_source: Sequence[str | None] | None = None,
        extra_info: Sequence[object] | None = None,
        **_: object,
    ) -> list[float]:
        if reward_model is None:
            raise DataError(
                f"verl reward {name!r} reads the column reward_model.ground_truth (verl's row format: prompt, "
                "data_source, reward_model, extra_info); the rows have none"
            )
        scores = []
        for row, completion in enumerate(completions):
            truth = reward_model[row]
            if not isinstance(truth, Mapping) or "ground_truth" not in truth:
                raise DataError(f"verl reward {name!r}: reward_model of row {row} has no ground_truth ({truth!r})")
            score = compute_score(
                data_source=data_source[row] if data_source is not None else None,
                solution_str=completion_text(completion),
                ground_truth=truth["ground_truth"],
                extra_info=extra_info[row] if extra_info is not None else None,
            )
            scores.append(score["score"] if isinstance(score, Mapping) else score)
        return scores

    reward.__name__ = f"verl_{name}"
    return reward


def resolve(name: str, key: str) -> BatchReward:
    """The reward ``verl:NAME`` stands for (``name`` is what follows ``verl:``): a verl built-in, or verl's
    ``compute_score`` at ``package.module:function``."""
    if name in VERL_SCORES:
        return verl_reward(VERL_SCORES[name], name)
    if ":" not in name:
        raise ConfigError(
            f"{key}: unknown verl reward {name!r}; expected one of: {', '.join(sorted(VERL_SCORES))}, or "
            "'verl:package.module:function'"
        )
    return verl_reward(import_callable(name, key=key, kind="reward"), name)


def adapt(fn: Callable[..., object], name: str) -> BatchReward | None:
    """``fn`` wrapped to honing's batch reward when it has verl's signature; None when it does not."""
    return verl_reward(fn, name) if is_verl_signature(fn) else None
