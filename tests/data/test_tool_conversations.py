"""Conversations with tools for SFT (the rows a policy learns its tool-call format from): a row's ``tools`` and an
assistant turn's ``tool_calls`` read and rendered by the chat template, the loss on the calls and the answer but not
on the tool's turn, bad rows named; and the ``chatml`` template rendering as it always has without tools."""

from __future__ import annotations

import json
import re

import pytest

from honing.config import validate
from honing.data.chat.chat_tokenizer import chat_tokenizer
from honing.data.chat.conversation import render_chat, tokenize_conversation
from honing.data.formats import RowError, to_example
from honing.rl.builtin_tools import calculator
from honing.rl.tools import tool_schema
from tests.recipes.test_grpo import grpo_raw

TOOLS = [tool_schema(calculator, key="test")]
CALL = {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "6 * 7"}}}
ROW = {
    "messages": [
        {"role": "user", "content": "What is 6 * 7?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "name": "calculator", "content": "42"},
        {"role": "assistant", "content": "42"},
    ],
    "tools": TOOLS,
}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    config = validate(grpo_raw(tmp_path_factory.mktemp("tok")))
    return chat_tokenizer(config.tokenizer, config.data, config.model)[0]


def test_chatml_without_tools_renders_as_before(tokenizer):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "tool", "content": "x"},
    ]
    assert render_chat(tokenizer, messages, chat_template="chatml", add_generation_prompt=True) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello"
        "<|im_end|>\n<|im_start|>tool\nx<|im_end|>\n<|im_start|>assistant\n"
    )


def test_a_row_with_tools_trains_on_the_call_and_the_answer_not_on_the_tool_turn(tokenizer):
    example = to_example(ROW, "conversation")
    assert example.tools == TOOLS
    messages = example.to_hf_messages()
    assert messages[1] == {"role": "assistant", "content": "", "tool_calls": [CALL]}
    assert messages[2] == {"role": "tool", "content": "42", "name": "calculator"}
    tokenized = tokenize_conversation(tokenizer, messages, chat_template="chatml", tools=example.tools)
    text = tokenizer.decode(tokenized.input_ids)
    assert text.startswith("<|im_start|>system\nTools, one JSON schema a line:\n{")
    trained = tokenizer.decode([t for t, label in zip(tokenized.input_ids, tokenized.labels) if label != -100])
    assert trained == (
        '<tool_call>{"name": "calculator", "arguments": {"expression": "6 * 7"}}</tool_call><|im_end|>42<|im_end|>'
    )
    # the tools as a JSON string (as some hub sets store them) read the same
    assert to_example({**ROW, "tools": json.dumps(TOOLS)}, "conversation").tools == TOOLS


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"tools": {"name": "x"}}, "'tools' must be a list of JSON schemas (objects), got dict"),
        ({"tools": "not json"}, "'tools' is a string that is not JSON"),
        (
            {
                "messages": [
                    {"role": "user", "content": "a", "tool_calls": [CALL]},
                    {"role": "assistant", "content": "b"},
                ]
            },
            "'tool_calls' in a 'user' message (messages[0]); only assistant turns make tool calls",
        ),
        (
            {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "", "tool_calls": "f"}]},
            "'tool_calls' must be a list of objects in messages[1]",
        ),
    ],
)
def test_bad_tool_rows_are_named(change, reason):
    with pytest.raises(RowError, match=re.escape(reason)):
        to_example({**ROW, **change}, "conversation")
