"""The built-in rewards, with Oumi's semantics (``oumi/datasets/grpo/rewards``; countdown from TinyZero, GSM8K
from verl), as functions ``f(prompts, completions, **columns) -> list[float | None]``."""

from __future__ import annotations

import ast
import difflib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from honing.rl.builtin_tools import arithmetic_value

#: a prompt or a completion as a reward receives it: text, or a conversation's messages (``{"role", "content"}``)
ChatOrText = str | Sequence[Mapping[str, Any]]


def completion_text(completion: ChatOrText) -> str:
    """The text of a completion: itself, or a conversational one's answer, the content of its last assistant turn
    (its only one, or the turn after the tool calls)."""
    if isinstance(completion, str):
        return completion
    answers = [message for message in completion if message.get("role", "assistant") == "assistant"]
    return (answers or completion)[-1]["content"]


def word_count(text: str) -> int:
    """Oumi's whitespace word count: ``re.split(r"\\s+", text)`` (an empty text counts 1)."""
    return len(re.split(r"\s+", text))


def soft_length_reward(words: int, target: int) -> float:
    """x·e^(1−x) with x = words / target: 1 at the target, smoothly less either side."""
    x = words / target
    return x * math.exp(-x) * math.e


def sharp_length_reward(words: int, target: int) -> float:
    """−|words − target|."""
    return -abs(words - target)


def _length_reward(shape: Callable[[int, int], float], target: int) -> Callable[..., list[float]]:
    def reward(prompts: Sequence[ChatOrText], completions: Sequence[ChatOrText], **columns: object) -> list[float]:
        return [shape(word_count(completion_text(c)), target) for c in completions]

    reward.__name__ = f"{shape.__name__}_{target}"
    return reward


def letter_share(prompts: Sequence[ChatOrText], completions: Sequence[ChatOrText], **columns: object) -> list[float]:
    """The share of the completion's characters that are the letter ``a`` (0 for an empty one): a reward that likes
    one token, which a tiny model from scratch learns in 150 PPO steps (configs/ppo.yaml)."""
    texts = [completion_text(c) for c in completions]
    return [text.count("a") / len(text) if text else 0.0 for text in texts]


def letter_count_reward(completion: str, target_count: int) -> float:
    """−3 without exactly one ``\\boxed{N}``, else 1/(|N − target| + 0.5) − 2 (0 when right)."""
    found = re.findall(r"\\boxed\{([-+]?\d+)\}", completion)
    if len(found) != 1:
        return -3.0
    return 1 / (abs(int(found[0]) - target_count) + 0.5) - 2


def count_letters(
    prompts: Sequence[ChatOrText], completions: Sequence[ChatOrText], letter_count: Sequence[int], **_: object
) -> list[float]:
    """Oumi's ``count_letters``: the dataset column ``letter_count`` against the completion's ``\\boxed{N}``."""
    return [letter_count_reward(completion_text(c), int(t)) for c, t in zip(completions, letter_count)]


def countdown_answer(text: str) -> str | None:
    """The last ``<answer>…</answer>`` of the completion's last line (TinyZero), stripped; None when absent."""
    matches = list(re.finditer(r"<answer>(.*?)</answer>", text.split("\n")[-1]))
    return matches[-1].group(1).strip() if matches else None


def evaluate_equation(equation: str) -> float | None:
    """The value of an expression of digits, ``+ - * / ( ) .`` and spaces, as Python's ``eval`` gives it (TinyZero
    evaluates with ``eval``; this walks the syntax tree instead, so a huge power fails rather than hangs)."""
    if not re.match(r"^[\d+\-*/().\s]+$", equation):
        return None
    try:
        return arithmetic_value(ast.parse(equation, mode="eval"))
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, TypeError):
        return None


def countdown_reward(completion: str, target: float, numbers: Sequence[int]) -> float:
    """1 when the answer uses exactly the given numbers and evaluates to ``target`` (within 1e-5), else 0."""
    equation = countdown_answer(completion)
    if equation is None:
        return 0.0
    used = sorted(int(n) for n in re.findall(r"\d+", equation))
    if used != sorted(int(n) for n in numbers):
        return 0.0
    result = evaluate_equation(equation)
    if result is None:
        return 0.0
    return 1.0 if abs(result - float(target)) < 1e-5 else 0.0


def countdown(
    prompts: Sequence[ChatOrText],
    completions: Sequence[ChatOrText],
    target: Sequence[float],
    nums: Sequence[Sequence[int]],
    **_: object,
) -> list[float]:
    """TinyZero's countdown: the dataset columns ``target`` and ``nums``."""
    return [countdown_reward(completion_text(c), float(t), n) for c, t, n in zip(completions, target, nums)]


def gsm8k_answer(text: str, method: str = "strict") -> str | None:
    """verl's extraction: ``strict`` the last ``#### N`` (commas and $ removed); ``flexible`` the last number."""
    if method == "strict":
        found = re.findall(r"#### (\-?[0-9\.\,]+)", text)
        return found[-1].replace(",", "").replace("$", "") if found else None
    numbers = [n for n in re.findall(r"(\-?[0-9\.\,]+)", text) if n not in ("", ".")]
    return numbers[-1] if numbers else None


def gsm8k_ground_truth(answer: object) -> str:
    """The reference answer of a GSM8K ``answer`` column: the number after ``####``, or the value itself."""
    text = str(answer)
    found = gsm8k_answer(text, "strict")
    return found if found is not None else text.strip()


def _gsm8k(method: str) -> Callable[..., list[float]]:
    def reward(
        prompts: Sequence[ChatOrText], completions: Sequence[ChatOrText], answer: Sequence[object], **_: object
    ) -> list[float]:
        scores = []
        for completion, reference in zip(completions, answer):
            found = gsm8k_answer(completion_text(completion), method)
            scores.append(1.0 if found is not None and found == gsm8k_ground_truth(reference) else 0.0)
        return scores

    reward.__name__ = f"gsm8k_{method}"
    return reward


def exact_answer(
    prompts: Sequence[ChatOrText], completions: Sequence[ChatOrText], answer: Sequence[object], **_: object
) -> list[float]:
    """1 when the completion, stripped, is the ``answer`` column's text, else 0 (honing's; not in Oumi)."""
    return [float(completion_text(c).strip() == str(a).strip()) for c, a in zip(completions, answer)]


def answer_similarity(
    prompts: Sequence[ChatOrText], completions: Sequence[ChatOrText], answer: Sequence[object], **_: object
) -> list[float]:
    """Partial credit in [0, 1]: difflib's ratio 2·matches / (len(a) + len(b)) of the stripped completion and
    ``answer`` (honing's; not in Oumi)."""
    return [
        difflib.SequenceMatcher(None, completion_text(c).strip(), str(a).strip()).ratio()
        for c, a in zip(completions, answer)
    ]


BUILTIN_REWARDS: dict[str, Callable[..., list[Any]]] = {
    **{f"soft_{t}tokens_completions": _length_reward(soft_length_reward, t) for t in (5, 10, 20)},
    **{f"sharp_{t}tokens_completions": _length_reward(sharp_length_reward, t) for t in (5, 10, 20)},
    "letter_a_share": letter_share,
    "count_letters": count_letters,
    "countdown": countdown,
    "gsm8k": _gsm8k("strict"),
    "gsm8k_flexible": _gsm8k("flexible"),
    "exact_answer": exact_answer,
    "answer_similarity": answer_similarity,
}
