"""verl's Geometry3K score (verl.utils.reward_score.geo3k: 0.9 for mathruler's grade of the last ``\\boxed{}`` plus
0.1 for the ``<think>`` format) as honing's ``geo3k`` reward over the ``answer`` column and as ``verl:geo3k`` over
verl's row columns; the numbers below are worked by hand from that formula."""

import pytest

from honing.rl import resolve_reward

pytest.importorskip("mathruler.grader")
pytest.importorskip("pylatexenc")

COMPLETIONS = [
    "<think>the angle is half</think> So the answer is \\boxed{\\frac{1}{2}}.",  # right, formatted: 0.9 + 0.1
    "The answer is \\boxed{0.5}",  # right (0.5 = 1/2 under mathruler), no <think>: 0.9
    "<think>guess</think> \\boxed{3}",  # wrong, formatted: 0.1
    "It is 0.5",  # no box: nothing to grade, no format: 0
]


def test_geo3k_scores_the_boxed_answer_and_the_think_format_against_the_answer_column():
    reward = resolve_reward("geo3k")
    scores = reward(prompts=["p"] * 4, completions=COMPLETIONS, answer=["\\frac{1}{2}"] * 4)
    assert scores == pytest.approx([1.0, 0.9, 0.1, 0.0])


def test_verl_geo3k_reads_verls_ground_truth_column_with_the_same_scores():
    reward = resolve_reward("verl:geo3k")
    rows = {
        "data_source": ["hiyouga/geometry3k"] * 4,
        "reward_model": [{"ground_truth": "\\frac{1}{2}", "style": "rule"}] * 4,
    }
    assert reward(prompts=["p"] * 4, completions=COMPLETIONS, **rows) == pytest.approx([1.0, 0.9, 0.1, 0.0])


def test_chat_completions_are_scored_on_their_text():
    reward = resolve_reward("geo3k")
    chat = [[{"role": "assistant", "content": COMPLETIONS[0]}]]
    assert reward(prompts=["p"], completions=chat, answer=["0.5"]) == pytest.approx([1.0])
