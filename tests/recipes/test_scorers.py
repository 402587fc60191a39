"""``callbacks.generation_eval.metrics``: names resolve to the reward registry's functions or import paths."""

import math

import pytest

from honing.errors import ConfigError
from honing.evaluate.scorers import generation_metrics


def test_defaults_and_own_metrics():
    assert generation_metrics("sft", None) == (False, None)
    assert generation_metrics("grpo", None) == (True, None)
    assert generation_metrics("sft", ["exact_match", "cer"]) == (True, None)


def test_rewards_and_import_paths_score_answers_against_the_expected_ones():
    cer, score = generation_metrics(
        "sft", ["exact_match", "answer_similarity", "tests.export.scorers:first_letter_right"]
    )
    assert cer is False
    values = score(["q1", "q2", "q3"], ["abc", "xbc", ""], {"answer": ["abc", "abc", "abc"]})
    assert values["answer_similarity"] == pytest.approx([1.0, 2 / 3, 0.0])
    assert values["first_letter_right"][:2] == [1.0, 0.0] and math.isnan(values["first_letter_right"][2])


def test_math_verify_compares_math_answers():
    pytest.importorskip("math_verify", reason="math-verify is not installed (pip install 'honing[eval]')")
    _, score = generation_metrics("sft", ["math_verify"])
    values = score(["q"] * 3, ["so it is $\\frac{1}{2}$", "0.5", "3"], {"answer": ["... #### 0.5", "1/2", "#### 4"]})
    assert values["math_verify"] == [1.0, 1.0, 0.0]


def test_an_unknown_metric_names_its_list_item():
    with pytest.raises(ConfigError) as info:
        generation_metrics("sft", ["exact_match", "no_such_metric"])
    assert str(info.value).startswith("callbacks.generation_eval.metrics[1]: unknown reward 'no_such_metric'")
