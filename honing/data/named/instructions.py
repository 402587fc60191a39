"""Named instruction and chat data sets: Alpaca, UltraChat and TL;DR, as conversations (SFT; GRPO reads their
prompts)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from honing.data.named.entry import NamedDataset, column

# Alpaca's own system lines (tatsu-lab/stanford_alpaca), as Oumi's AlpacaDataset writes them
ALPACA_SYSTEM_WITH_INPUT = (
    "Below is an instruction that describes a task, paired with an input that provides further context. Write a "
    "response that appropriately completes the request."
)
ALPACA_SYSTEM = (
    "Below is an instruction that describes a task. Write a response that appropriately completes the request."
)


def alpaca_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """``instruction`` / ``input`` / ``output`` → Alpaca's system line, the instruction (with its input under
    ``### Input:``) and the output, as Oumi's AlpacaDataset."""
    instruction, output = column(row, "instruction"), column(row, "output")
    extra = row.get("input") or ""
    if extra:
        system, user = ALPACA_SYSTEM_WITH_INPUT, f"{instruction}\n\n### Input:\n{column(row, 'input')}"
    else:
        system, user = ALPACA_SYSTEM, instruction
    return {
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
            {"role": "assistant", "content": output},
        ]
    }


def ultrachat_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """``messages`` (the dialogue), ``prompt`` and ``prompt_id`` → the dialogue; the id kept as metadata."""
    messages = column(row, "messages", list)
    return {"messages": messages, "metadata": {"prompt_id": row["prompt_id"]} if row.get("prompt_id") else {}}


def tldr_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """``prompt`` (a post ending in ``TL;DR:``) / ``completion`` (its summary): a prompt row that is also a
    prompt-completion pair (SFT: the post, then the summary; GRPO: the post, the summary a column)."""
    return {"prompt": column(row, "prompt"), "completion": column(row, "completion")}


INSTRUCTIONS = (
    NamedDataset(
        name="alpaca",
        aliases=("tatsu-lab/alpaca", "yahma/alpaca-cleaned"),
        columns=(("instruction", "output"),),
        gives="conversations",
        build=alpaca_row,
        description="instructions and answers, with Alpaca's system line and ### Input:",
    ),
    NamedDataset(
        name="ultrachat",
        aliases=("HuggingFaceH4/ultrachat_200k",),
        columns=(("messages", "prompt_id"),),
        gives="conversations",
        build=ultrachat_row,
        split="train_sft",
        description="multi-turn dialogues (splits train_sft, test_sft, train_gen, test_gen)",
    ),
    NamedDataset(
        name="tldr",
        aliases=("trl-lib/tldr",),
        columns=(("prompt", "completion"),),
        gives="conversations",
        build=tldr_row,
        reward="soft_20tokens_completions",
        description="Reddit posts and their summaries; GRPO rewards the summary's length",
    ),
)
