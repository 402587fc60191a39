"""Math answers checked as mathematical expressions (``1/2`` equals ``0.5``) against the ``answer`` column's:
Hugging Face's math-verify (``math_verify``) and verl's Geometry3K score through mathruler (``geo3k``); both
``pip install 'honing[eval]'``."""

from __future__ import annotations

import re
from collections.abc import Sequence

from honing.errors import ConfigError
from honing.rl.builtin_rewards import ChatOrText, completion_text

#: GSM8K writes its gold answer after this marker, below the worked solution
GSM8K_MARKER = "####"


def gold_text(answer: object) -> str:
    """The gold answer to parse: what follows GSM8K's ``####`` when present, else the whole answer."""
    text = str(answer)
    return text.rsplit(GSM8K_MARKER, 1)[-1].strip() if GSM8K_MARKER in text else text.strip()


def math_verify(
    prompts: Sequence[ChatOrText], completions: Sequence[ChatOrText], answer: Sequence[object], **_: object
) -> list[float | None]:
    """1.0 when math-verify finds the completion's answer equal to the ``answer`` column's, else 0.0; None when the
    gold answer holds nothing math-verify can parse (the reward does not apply)."""
    try:
        from math_verify import parse, verify
    except ImportError as error:
        raise ConfigError(f"reward 'math_verify' needs math-verify ({error}); pip install 'honing[eval]'") from None
    scores: list[float | None] = []
    for completion, gold in zip(completions, answer):
        parsed_gold = parse(gold_text(gold))
        if not parsed_gold:
            scores.append(None)
            continue
        scores.append(float(verify(parsed_gold, parse(completion_text(completion)))))
    return scores


#: verl's geo3k format: reasoning in <think> tags, then a \boxed{} answer (verl.utils.reward_score.geo3k)
GEO3K_FORMAT = re.compile(r"<think>.*</think>.*\\boxed\{.*\}.*", re.DOTALL)
#: the share of verl's geo3k score that the format alone earns
GEO3K_FORMAT_SCORE = 0.1


def geo3k_score(completion: str, gold: object) -> float:
    """verl's built-in score for ``hiyouga/geometry3k``: 0.9 when mathruler grades the completion's last
    ``\\boxed{}`` equal to the gold answer, plus 0.1 when it thinks in ``<think>`` tags before the box."""
    try:
        from mathruler.grader import extract_boxed_content, grade_answer
    except ImportError as error:
        raise ConfigError(f"reward 'geo3k' needs mathruler ({error}); pip install 'honing[eval]'") from None
    correct = float(grade_answer(extract_boxed_content(completion), str(gold)))
    formatted = float(GEO3K_FORMAT.fullmatch(completion) is not None)
    return (1.0 - GEO3K_FORMAT_SCORE) * correct + GEO3K_FORMAT_SCORE * formatted


def geo3k(
    prompts: Sequence[ChatOrText], completions: Sequence[ChatOrText], answer: Sequence[object], **_: object
) -> list[float]:
    """verl's Geometry3K reward (``geo3k_score``) of each completion against the ``answer`` column."""
    return [geo3k_score(completion_text(completion), gold) for completion, gold in zip(completions, answer)]
