"""Named data sets of problems with checkable answers, for GRPO: countdown, GSM8K, MATH and letter counting. Each
builder writes the prompt its data set is published with (TinyZero's, Oumi's, verl's) and keeps the columns its
reward reads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from honing.data.example_types import RowError
from honing.data.named.entry import NamedDataset, column

# TinyZero's countdown prompt, as Oumi's CountdownGrpoDataset and the Oumi document's verl row write it
COUNTDOWN_PROMPT = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The "
    "assistant first thinks about the reasoning process in the mind and then provides the user with the answer.\n"
    "User: Using the numbers {nums}, create an equation that equals {target}. You can use basic arithmetic "
    "operations (+, -, *, /) and each number can only be used once. Show your work in <think> </think> tags. And "
    "return the final answer in <answer> </answer> tags, for example <answer> (1 + 2) / 3 </answer>.\n"
    "Assistant: Let me solve this step by step.\n<think>"
)
# Oumi's GSM8KGrpoDataset appends this to the question
GSM8K_INSTRUCTION = "Let's solve this step by step and provide the final answer after ####."
# verl's MATH preprocessing (examples/data_preprocess/math_dataset.py) appends this to the problem
MATH_INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."
# Oumi's LetterCountGrpoDataset puts this system turn before the question (its text since Oumi's PR 1625, which the
# Oumi document's TRL_GRPO row shows)
LETTER_COUNT_SYSTEM = (
    'Your final answer should be an integer written as digits and formatted as "\\boxed{your_answer}". For example, '
    'if the answer is 42, you should output "\\boxed{42}".'
)


def countdown_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """``{"target": 87, "nums": [79, 8]}`` (or d1's ``{"input": "79,8", "output": "87"}``) → the prompt row Oumi
    writes for verl: TinyZero's prompt, ``target`` / ``nums`` (honing's ``countdown``) and ``reward_model``
    (``verl:countdown``)."""
    if "target" in row:
        target, nums = column(row, "target", (int, float, str)), column(row, "nums", list)
    else:
        target, nums = column(row, "output"), column(row, "input").split(",")
    try:
        target, nums = int(target), [int(number) for number in nums]
    except (TypeError, ValueError):
        raise RowError(f"countdown's target and numbers must be integers, got {target!r} and {nums!r}") from None
    return {
        "prompt": [{"role": "user", "content": COUNTDOWN_PROMPT.format(nums=nums, target=target)}],
        "target": target,
        "nums": nums,
        "data_source": "countdown",
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": {"target": target, "numbers": nums}},
    }


def gsm8k_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """``question`` / ``answer`` → the question with Oumi's instruction, answered by the worked ``answer`` (its
    ``#### N`` is what the ``gsm8k`` reward checks)."""
    question = column(row, "question")
    return {
        "messages": [
            {"role": "user", "content": f"{question}\n\n{GSM8K_INSTRUCTION}"},
            {"role": "assistant", "content": column(row, "answer")},
        ]
    }


def math_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """``problem`` / ``solution`` → the problem with verl's instruction, answered by the ``solution`` (its
    ``\\boxed{}`` is what ``math_verify`` checks)."""
    return {
        "messages": [
            {"role": "user", "content": f"{column(row, 'problem')} {MATH_INSTRUCTION}"},
            {"role": "assistant", "content": column(row, "solution")},
        ]
    }


def letter_count_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """``messages`` (the question) / ``metadata.letter_count_integer`` → Oumi's system turn and the question as
    the prompt, the count as ``letter_count`` (the ``count_letters`` reward)."""
    messages, metadata = column(row, "messages", list), column(row, "metadata", dict)
    count = column(metadata, "letter_count_integer", int)
    return {"prompt": [{"role": "system", "content": LETTER_COUNT_SYSTEM}, *messages], "letter_count": count}


REASONING = (
    NamedDataset(
        name="countdown",
        aliases=("Jiayi-Pan/Countdown-Tasks-3to4", "d1shs0ap/countdown"),
        columns=(("target", "nums"), ("input", "output")),
        gives="prompts",
        build=countdown_row,
        reward="countdown",
        description="make the target from the numbers; TinyZero's prompt, answer in <answer> tags",
    ),
    NamedDataset(
        name="gsm8k",
        aliases=("openai/gsm8k",),
        columns=(("question", "answer"),),
        gives="conversations",
        build=gsm8k_row,
        reward="gsm8k",
        subset="main",
        description="grade-school math; the answer after ####",
    ),
    NamedDataset(
        name="math",
        aliases=(
            "hendrycks/competition_math",
            "lighteval/MATH",
            "DigitalLearningGmbH/MATH-lighteval",
            "HuggingFaceH4/MATH-500",
        ),
        columns=(("problem", "solution"),),
        gives="conversations",
        build=math_row,
        reward="math_verify",
        description="competition math; the answer in \\boxed{}",
    ),
    NamedDataset(
        name="letter_count",
        aliases=("oumi-ai/oumi-letter-count", "oumi-ai/oumi-letter-count-clean"),
        columns=(("messages", "metadata"),),
        gives="prompts",
        build=letter_count_row,
        reward="count_letters",
        description="how many times a letter is in a word; the answer in \\boxed{}",
    ),
)
