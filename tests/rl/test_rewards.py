"""The built-in rewards on Oumi's documented values and on the shared countdown and GSM8K sets; the registry."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from honing.errors import ConfigError, DataError
from honing.rl import REWARDS, RewardScorer, register_reward, resolve_reward
from honing.rl.builtin_rewards import countdown_reward, gsm8k_answer, letter_count_reward, soft_length_reward

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


def words(n: int) -> str:
    return " ".join(["w"] * n)


@pytest.mark.parametrize(
    "count, expected",
    [(1, 0.24596031), (5, 0.824360635), (10, 1.0), (20, 0.7357588), (100, 0.001234098)],
)
def test_soft_length_reward_oumi_values(count, expected):
    assert soft_length_reward(count, 10) == pytest.approx(expected, rel=1e-5)
    assert REWARDS["soft_10tokens_completions"]([None], [words(count)])[0] == pytest.approx(expected, rel=1e-5)


def test_length_rewards_count_whitespace_words_of_each_target():
    text = "one  two\nthree"  # runs of whitespace split once: 3 words
    assert REWARDS["sharp_5tokens_completions"]([None], [text]) == [-2]
    assert REWARDS["sharp_10tokens_completions"]([None], [text]) == [-7]
    assert REWARDS["sharp_20tokens_completions"]([None], [text]) == [-17]
    assert REWARDS["soft_5tokens_completions"]([None], [text])[0] == pytest.approx(0.6 * math.exp(0.4))
    assert REWARDS["soft_20tokens_completions"]([None], [text])[0] == pytest.approx(0.15 * math.exp(0.85))
    # a conversational completion is read from its first message
    assert REWARDS["sharp_10tokens_completions"]([None], [[{"role": "assistant", "content": words(10)}]]) == [0]


@pytest.mark.parametrize(
    "text, target, reward",
    [
        ("foo bar 1", 1, -3),
        (r"\boxed{1}", 1, 0.0),
        (r"\boxed{+1}", 1, 0.0),
        (r"\boxed{4}", 1, -1.71429),
        (r"\boxed{-1}", 1, -1.6),
        (r"The answer is \boxed{one}", 0, -3.0),
        (r"\boxed{1} \boxed{2}", 1, -3.0),
        (r"The number of 'r's in strawberry is \boxed{10}.", 3, -1.86667),
    ],
)
def test_count_letters_oumi_values(text, target, reward):
    assert letter_count_reward(text, target) == pytest.approx(reward, rel=1e-3)
    assert REWARDS["count_letters"]([None], [text], letter_count=[target])[0] == pytest.approx(reward, rel=1e-3)


@pytest.mark.parametrize(
    "text, nums, target, reward",
    [
        ("foo bar 1", [], 1, 0),
        ("<answer>1 + 2</answer>", [1, 3], 2, 0),
        ("<answer>1 / 2</answer>", [1, 2, 3], 6, 0),
        ("<answer></answer>", [], 1, 0),
        ("<answer>1 foo 2 bar 3</answer>", [1, 2, 3], 1, 0),
        ("<answer>1.0 * 2.0 * 3.0</answer>", [1, 2, 3], 1, 0),
        ("<answer>1 + 2 + 3</answer>", [1, 2, 3], 1, 0),
        ("<answer> (1 * 2) / 3</answer>", [1, 2, 3], 1, 0),
        ("<answer> ( 3 - 2 ) * 1 </answer>", [1, 2, 3], 1, 1),
        ("<answer>(3-2)*1</answer>", [1, 2, 3], 1, 1),
        # TinyZero reads the last line's last answer
        ("<answer>1+2+3</answer>\n<answer>(3-2)*1</answer>", [1, 2, 3], 1, 1),
        ("<answer>(3-2)*1</answer>\nthat is all", [1, 2, 3], 1, 0),
        ("<answer>9**9**9**9</answer>", [9, 9, 9, 9], 1, 0),  # refused, not evaluated for hours
    ],
)
def test_countdown_oumi_values(text, nums, target, reward):
    assert countdown_reward(text, target, nums) == reward
    assert REWARDS["countdown"]([None], [text], target=[target], nums=[nums]) == [reward]


def test_gsm8k_strict_and_flexible():
    assert gsm8k_answer("so 3 + 4 = 7\n#### 1,234") == "1234"
    assert gsm8k_answer("no hashes, the answer is 7.") is None
    assert gsm8k_answer("no hashes, the answer is 7.", "flexible") == "7."
    assert gsm8k_answer("first 5 then 12 .", "flexible") == "12"
    reference = "She makes 9 * 2 = $<<9*2=18>>18 every day.\n#### 18"
    strict, flexible = REWARDS["gsm8k"], REWARDS["gsm8k_flexible"]
    assert strict([None] * 3, ["#### 18", "the answer is 18", "#### 17"], answer=[reference] * 3) == [1.0, 0.0, 0.0]
    assert flexible([None] * 2, ["the answer is 18", "18 or 17"], answer=[reference] * 2) == [1.0, 0.0]


def shared_rows(name: str) -> list[dict]:
    path = SHARED / name
    if not path.exists():
        pytest.skip(f"{path} is absent (a fresh clone has no ../shared)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_countdown_on_the_shared_countdown_set():
    rows = shared_rows("countdown/countdown_cd3_test.jsonl")
    nums = [[int(n) for n in row["input"].split(",")] for row in rows]
    targets = [int(row["output"]) for row in rows]
    # a brute-force solver's answer earns 1 wherever one exists; the numbers summed earn 1 only when right
    solved = [_solve(n, t) for n, t in zip(nums, targets)]
    answers = [f"<answer>{s}</answer>" for s in solved if s is not None]
    kept = [i for i, s in enumerate(solved) if s is not None]
    assert len(kept) > 200
    scores = REWARDS["countdown"](
        [None] * len(kept), answers, target=[targets[i] for i in kept], nums=[nums[i] for i in kept]
    )
    assert scores == [1.0] * len(kept)
    sums = [f"<answer>{' + '.join(map(str, n))}</answer>" for n in nums]
    scores = REWARDS["countdown"]([None] * len(rows), sums, target=targets, nums=nums)
    assert scores == [1.0 if sum(n) == t else 0.0 for n, t in zip(nums, targets)]


def _solve(nums: list[int], target: int) -> str | None:
    import itertools

    for a, b, c in itertools.permutations(nums):
        for op1, op2 in itertools.product("+-*/", repeat=2):
            for expression in (f"({a} {op1} {b}) {op2} {c}", f"{a} {op1} ({b} {op2} {c})"):
                try:
                    if abs(eval(expression) - target) < 1e-5:
                        return expression
                except ZeroDivisionError:
                    continue
    return None


def test_gsm8k_on_the_shared_gsm8k_set():
    rows = shared_rows("gsm8k/test.jsonl")
    answers = [row["answer"] for row in rows]
    # the reference solutions themselves end in "#### N": all right; the final number off by one: all wrong
    assert REWARDS["gsm8k"]([None] * len(rows), answers, answer=answers) == [1.0] * len(rows)
    pairs = [(f"#### {int(gsm8k_answer(a)) + 1}", a) for a in answers if gsm8k_answer(a).lstrip("-").isdigit()]
    assert len(pairs) > 1000
    wrong, references = [p[0] for p in pairs], [p[1] for p in pairs]
    assert REWARDS["gsm8k"]([None] * len(pairs), wrong, answer=references) == [0.0] * len(pairs)


def test_user_reward_by_import_path_and_weights(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(
        "def shouty(prompts, completions, **columns):\n    return [1.0 if c.isupper() else None for c in completions]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    scorer = RewardScorer([("my_rewards:shouty", 0.5), ("sharp_5tokens_completions", 2.0)])
    scores = scorer.score(["p", "p"], ["HELLO", "hello"], {})
    assert scores[0].tolist() == [1.0, -4.0]
    assert math.isnan(scores[1, 0].item()) and scores[1, 1].item() == -4.0
    assert scorer.weights.tolist() == [0.5, 2.0]


def test_register_reward_by_name():
    @register_reward("test_always_two")
    def always_two(prompts, completions, **columns):
        return [2.0] * len(completions)

    assert resolve_reward("test_always_two") is always_two
    del REWARDS["test_always_two"]


def test_unknown_or_unimportable_rewards_are_config_errors():
    with pytest.raises(ConfigError, match="unknown reward 'nope'.*countdown"):
        resolve_reward("nope")
    with pytest.raises(ConfigError, match="cannot import reward 'no_such_module:f'"):
        resolve_reward("no_such_module:f")


def test_a_raising_reward_names_itself_and_the_prompt(tmp_path, monkeypatch):
    (tmp_path / "bad_rewards.py").write_text(
        "def picky(prompts, completions, **columns):\n"
        "    return [1 / len(c) for c in completions]\n"
        "def short(prompts, completions, **columns):\n"
        "    return [1.0]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(DataError) as info:
        RewardScorer([("bad_rewards:picky", 1.0)]).score(["first prompt", "second prompt"], ["ok", ""], {})
    message = str(info.value)
    assert "reward 'bad_rewards:picky' raised ZeroDivisionError" in message and "'second prompt'" in message
    with pytest.raises(DataError, match="reward 'bad_rewards:short' returned 1 value.s. for 2 completions"):
        RewardScorer([("bad_rewards:short", 1.0)]).score(["a", "b"], ["x", "y"], {})
    assert torch.isnan(RewardScorer([("soft_5tokens_completions", 1.0)]).score([], [], {})).numel() == 0


def test_answer_rewards_score_against_the_answer_column():
    completions = ["olleh", [{"role": "assistant", "content": " olleh\n"}], "ollhe", ""]
    answer = ["olleh"] * 4
    assert REWARDS["exact_answer"]([None] * 4, completions, answer=answer) == [1.0, 1.0, 0.0, 0.0]
    similarity = REWARDS["answer_similarity"]([None] * 4, completions, answer=answer)
    assert similarity[:2] == [1.0, 1.0] and similarity[3] == 0.0
    assert similarity[2] == pytest.approx(2 * 4 / 10)  # "oll" + "e" match: 2·4 / (5 + 5)


def test_letter_a_share_is_the_share_of_the_completion_that_is_the_letter_a():
    completions = ["aaaa", "abab", "xyz", "", [{"role": "assistant", "content": "ba"}]]
    assert REWARDS["letter_a_share"]([None] * 5, completions) == [1.0, 0.5, 0.0, 0.0, 0.5]


def _double_scheme(name, key):
    """A scheme's resolver for the test below: ``double:N`` scores every completion 2 * N."""
    return lambda prompts, completions, **_: [2.0 * float(name)] * len(completions)


def _length_adapter(fn, name):
    """An adapter for the test below: wraps functions taking ``text`` alone, leaves the others."""
    if "text" not in fn.__code__.co_varnames[: fn.__code__.co_argcount]:
        return None
    return lambda prompts, completions, **_: [fn(text=completion) for completion in completions]


def test_registered_schemes_and_adapters_reach_the_reward_registry(monkeypatch):
    import sys
    import types

    from honing import extensions

    module = types.ModuleType("extension_rewards")
    module.double, module.adapt = _double_scheme, _length_adapter
    module.length = lambda text: float(len(text))
    module.plain = lambda prompts, completions, **_: [1.0] * len(completions)
    monkeypatch.setitem(sys.modules, "extension_rewards", module)
    monkeypatch.setitem(extensions.REWARD_SCHEMES, "double", "extension_rewards:double")
    monkeypatch.setattr(extensions, "REWARD_ADAPTERS", ["extension_rewards:adapt"])
    assert resolve_reward("double:3")(prompts=["p"], completions=["c"]) == [6.0]
    assert resolve_reward("extension_rewards:length")(prompts=["p", "q"], completions=["ab", "c"]) == [2.0, 1.0]
    assert resolve_reward("extension_rewards:plain") is module.plain  # not the adapter's signature: as imported
