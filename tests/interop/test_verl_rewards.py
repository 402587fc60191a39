"""verl's reward signature and row columns (``honing.interop.verl_rewards``): ``verl:NAME``, ``verl:module:function``
and functions recognised by their parameters, resolved by the core's reward registry through the extension points
``honing.interop`` fills."""

import sys
import types

import pytest

from honing.errors import ConfigError, DataError
from honing.rl import resolve_reward

ROWS = {
    "data_source": ["countdown", "countdown"],
    "reward_model": [
        {"ground_truth": {"numbers": [79, 8], "target": 87}, "style": "rule"},
        {"ground_truth": {"numbers": [3, 4], "target": 7}, "style": "rule"},
    ],
    "extra_info": [{"split": "train"}, {"split": "train"}],
}


def test_the_verl_countdown_reads_the_ground_truth_column():
    reward = resolve_reward("verl:countdown")
    completions = ["<answer>79 + 8</answer>", "<answer>3 * 4</answer>"]
    assert reward(prompts=["p", "q"], completions=completions, **ROWS) == [1.0, 0.0]


def test_a_user_compute_score_is_called_per_completion_with_verl_arguments(monkeypatch):
    calls = []

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        calls.append((data_source, solution_str, ground_truth["target"], extra_info["split"]))
        return {"score": float(len(solution_str))}

    module = types.ModuleType("verl_user_rewards")
    module.compute_score = compute_score
    monkeypatch.setitem(sys.modules, "verl_user_rewards", module)
    for name in ("verl:verl_user_rewards:compute_score", "verl_user_rewards:compute_score"):
        calls.clear()
        assert resolve_reward(name)(prompts=["p", "q"], completions=["ab", "c"], **ROWS) == [2.0, 1.0]
        assert calls == [("countdown", "ab", 87, "train"), ("countdown", "c", 7, "train")]


def test_rows_without_verl_columns_and_unknown_names_are_one_line_errors():
    with pytest.raises(DataError, match=r"reads the column reward_model\.ground_truth"):
        resolve_reward("verl:gsm8k")(prompts=["p"], completions=["#### 4"], answer=["4"])
    with pytest.raises(ConfigError, match=r"unknown verl reward 'nope'; expected one of: countdown, geo3k, gsm8k"):
        resolve_reward("verl:nope")
