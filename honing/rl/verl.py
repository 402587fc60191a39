"""verl's reward signature and row format, for Oumi's ``VERL_GRPO`` configs and verl users.

A verl reward is ``compute_score(data_source, solution_str, ground_truth, extra_info=None) -> float`` (or a dict
with a ``"score"``), called once per completion; a verl row is ``{"prompt": [messages], "data_source": ...,
"reward_model": {"ground_truth": ...}, "extra_info": {...}}``. honing reads such a row as a prompt row (its other
keys become columns), and ``verl_reward`` turns a ``compute_score`` into honing's batch reward
``f(prompts, completions, **columns)`` that reads those columns.

Named as ``verl:NAME`` (a verl built-in below) or ``verl:package.module:function``; a function imported by path
whose parameters include ``solution_str`` and ``ground_truth`` is recognised as verl's without the prefix.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from honing.errors import DataError
from honing.rl.builtin_rewards import completion_text, countdown_reward, gsm8k_answer, gsm8k_ground_truth

PREFIX = "verl:"
ComputeScore = Callable[..., Any]


def countdown_score(data_source: Any, solution_str: str, ground_truth: Mapping[str, Any], extra_info: Any = None):
    """Countdown with verl's ground truth ``{"numbers": [...], "target": N}`` (honing's ``countdown`` rules)."""
    return countdown_reward(solution_str, float(ground_truth["target"]), ground_truth["numbers"])


def gsm8k_score(data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None) -> float:
    """GSM8K with verl's strict ``#### N`` extraction against the ground-truth number."""
    found = gsm8k_answer(solution_str, "strict")
    return 1.0 if found is not None and found == gsm8k_ground_truth(ground_truth) else 0.0


#: verl-signature built-ins, by the names Oumi registers them under
VERL_SCORES: dict[str, ComputeScore] = {"countdown": countdown_score, "gsm8k": gsm8k_score}


def is_verl_signature(fn: Callable[..., Any]) -> bool:
    """True when ``fn`` takes verl's ``solution_str`` and ``ground_truth`` parameters."""
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "solution_str" in parameters and "ground_truth" in parameters


def verl_reward(compute_score: ComputeScore, name: str) -> Callable[..., list[Any]]:
    """honing's batch reward calling verl's ``compute_score`` per completion with the row's verl columns."""

    def reward(
        prompts: Sequence[Any],
        completions: Sequence[Any],
        reward_model: Sequence[Any] | None = None,
        data_source: Sequence[Any] | None = None,
        extra_info: Sequence[Any] | None = None,
        **_: Any,
    ) -> list[Any]:
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
