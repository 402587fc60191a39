"""The reward registry: a name → ``f(prompts, completions, **dataset_columns) -> list[float | None]``.

A reward is a built-in name (``honing.rl.builtin_rewards``), one registered with ``register_reward``, or a user
function by import path ``package.module:function`` (importable from the working directory or ``PYTHONPATH``), or a
trained reward model's folder ``reward_model:PATH`` (``honing.rl.reward_model``), or a name in a scheme another
system's layer registers (``SCHEME:NAME``, ``honing.extensions``), whose adapters also wrap a function imported by path
that is written to their system's signature.
``None`` means "not applicable to this completion" (TRL's semantics): it counts as 0 in the weighted sum, and a
completion no reward applies to gets no advantage. A reward that raises, or returns the wrong number of values,
stops the run with a message naming the reward and the prompt.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from honing import extensions
from honing.errors import ConfigError, DataError
from honing.rl import reward_model
from honing.rl.builtin_rewards import BUILTIN_REWARDS, completion_text
from honing.rl.imports import known_or_imported, register_in
from honing.rl.math_rewards import geo3k, math_verify

RewardFn = Callable[..., Sequence[Any]]

#: every reward known by name (math_verify and geo3k import their libraries only when they score)
REWARDS: dict[str, RewardFn] = {**BUILTIN_REWARDS, "math_verify": math_verify, "geo3k": geo3k}


def register_reward(name: str) -> Callable[[RewardFn], RewardFn]:
    """Decorator: make ``fn`` available as ``grpo.rewards: [{name: NAME}]``."""
    return register_in(REWARDS, name)


def resolve_reward(name: str, *, key: str = "grpo.rewards") -> RewardFn:
    """The function a reward name stands for: registered, a registered scheme's ``SCHEME:NAME``, or imported from
    ``module:function`` (wrapped by the adapter that recognises its signature, if one does)."""
    if name in REWARDS:
        return REWARDS[name]
    if name.startswith(reward_model.PREFIX):  # a trained reward model's folder, loaded once
        return reward_model.reward_model_reward(name, key)
    scheme, _, rest = name.partition(":")
    if scheme in extensions.REWARD_SCHEMES:
        return extensions.load(extensions.REWARD_SCHEMES[scheme])(rest, key)
    fn = known_or_imported(REWARDS, name, key=key, kind="reward")
    for adapt in extensions.reward_adapters():
        adapted = adapt(fn, name)
        if adapted is not None:
            return adapted
    return fn


class RewardScorer:
    """Scores completions with several weighted rewards."""

    def __init__(self, rewards: Sequence[tuple[str, float]], *, key: str = "grpo.rewards"):
        if not rewards:
            raise ConfigError(f"{key}: give at least one reward, e.g. [{{name: countdown, weight: 1.0}}]")
        self.names = [name for name, _ in rewards]
        self.functions = [resolve_reward(name, key=f"{key}[{i}].name") for i, (name, _) in enumerate(rewards)]
        self.weights = torch.tensor([float(weight) for _, weight in rewards])

    def score(
        self, prompts: Sequence[Any], completions: Sequence[Any], columns: Mapping[str, Sequence[Any]]
    ) -> torch.Tensor:
        """A float32 tensor (completions × rewards), NaN where a reward returned None."""
        out = torch.empty(len(completions), len(self.functions))
        for index, (name, fn) in enumerate(zip(self.names, self.functions)):
            out[:, index] = torch.tensor(self._call(name, fn, prompts, completions, columns), dtype=torch.float32)
        return out

    def _call(
        self,
        name: str,
        fn: RewardFn,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        columns: Mapping[str, Sequence[Any]],
    ) -> list[float]:
        try:
            values = list(fn(prompts=list(prompts), completions=list(completions), **columns))
        except Exception as error:
            row = _first_failing_row(fn, prompts, completions, columns)
            raise DataError(
                f"reward {name!r} raised {type(error).__name__}: {error} (prompt: {_show(prompts[row])!r}, "
                f"completion: {_show(completion_text(completions[row]))!r})"
            ) from error
        if len(values) != len(completions):
            raise DataError(
                f"reward {name!r} returned {len(values)} value(s) for {len(completions)} completions; expected one "
                f"float or None per completion (first prompt: {_show(prompts[0])!r})"
            )
        scores = []
        for row, value in enumerate(values):
            if value is None:
                scores.append(math.nan)
                continue
            try:
                scores.append(float(value))
            except (TypeError, ValueError):
                raise DataError(
                    f"reward {name!r} returned {value!r} for completion {row}; expected a float or None "
                    f"(prompt: {_show(prompts[row])!r})"
                ) from None
        return scores


def _first_failing_row(
    fn: RewardFn, prompts: Sequence[Any], completions: Sequence[Any], columns: Mapping[str, Sequence[Any]]
) -> int:
    """The first completion the reward fails on alone (the first one when it fails only on the whole batch)."""
    for row in range(len(completions)):
        try:
            fn(prompts=[prompts[row]], completions=[completions[row]], **{k: [v[row]] for k, v in columns.items()})
        except Exception:
            return row
    return 0


def _show(value: object, limit: int = 200) -> str:
    """A prompt or completion shortened for an error message."""
    if isinstance(value, list):  # a conversation: its last message
        value = value[-1].get("content", "") if value and isinstance(value[-1], dict) else str(value)
    text = str(value)
    return text if len(text) <= limit else text[:limit] + "…"
