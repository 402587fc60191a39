"""Tool turns under the chat templates models ship with, read from TRL's copies of the originals (skipped without
TRL): Qwen2.5's (Hermes calls, tool answers in a user turn of <tool_response> blocks) and Llama 3.1's (a JSON call
with "parameters", the answer in an ipython turn). A conversation sampled with tools is the template's own
rendering of the same conversation with a structured tool call, token for token; Qwen3's template, which rewrites
earlier turns, is refused in one line instead of producing tokens no rendering has."""

from __future__ import annotations

import os

import pytest
import torch
from tokenizers import AddedToken

from honing.data.chat.conversation import tokenize_conversation
from honing.data.tokenizer import build_tokenizer
from honing.errors import DataError
from honing.methods.tool_turns import ToolTurns
from honing.recipes.tool_parts import check_template_shows_tools
from honing.rl.builtin_tools import calculator
from honing.rl.tool_calls import detect_tool_call_format
from honing.rl.tools import ToolBox, tool_schema
from tests.methods.test_tool_turns import ScriptedPolicy

trl = pytest.importorskip("trl")
TEMPLATES = os.path.join(os.path.dirname(trl.__file__), "chat_templates")
TOOLS = [tool_schema(calculator, key="test")]
ARGUMENTS = {"expression": "347 * 829"}

#: template → (its special tokens, its end-of-turn token, the call as the model writes it, the tool-call format)
MODELS = {
    "qwen2_5": (
        ("<|im_start|>", "<|im_end|>", "<|endoftext|>"),
        "<|im_end|>",
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "347 * 829"}}\n</tool_call>',
        "hermes",
    ),
    "llama3_1": (
        ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>"),
        "<|eot_id|>",
        '{"name": "calculator", "parameters": {"expression": "347 * 829"}}',
        "json",
    ),
}


def model_tokenizer(name: str, specials: tuple[str, ...]):
    """A byte-level tokenizer with the model's special tokens and its shipped chat template."""
    tokenizer = build_tokenizer("byte")
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in specials], special_tokens=True)
    with open(os.path.join(TEMPLATES, f"{name}.jinja"), encoding="utf-8") as handle:
        tokenizer.chat_template = handle.read()
    return tokenizer


def sample(tokenizer, end, call, format):
    prompt = [{"role": "user", "content": "What is 347 * 829?"}]
    text = tokenizer.apply_chat_template(prompt, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    turns = ToolTurns(
        ToolBox({"calculator": calculator}, timeout=5, max_response_length=100),
        tokenizer=tokenizer,
        tool_call_format=format,
        max_turns=2,
        max_completion_length=400,
        stop_token_ids=[tokenizer.convert_tokens_to_ids(end)],
        pad_token_id=tokenizer.pad_token_id,
    )
    policy = ScriptedPolicy(tokenizer, [[call], ["287663"]])
    policy.end_token = end
    out = turns.sample(policy, {}, [prompt], torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long), [0])
    return prompt, ids, out


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_conversation_sampled_with_tools_is_the_shipped_templates_rendering(name):
    specials, end, call, format = MODELS[name]
    tokenizer = model_tokenizer(name, specials)
    check_template_shows_tools(tokenizer, TOOLS)
    assert detect_tool_call_format(tokenizer.chat_template) == format
    prompt, ids, out = sample(tokenizer, end, call, format)
    assert out.tool_counts.tolist() == [[1, 0]]
    assert out.completions[0][1] == {"role": "tool", "name": "calculator", "content": "287663"}
    structured = {"type": "function", "function": {"name": "calculator", "arguments": ARGUMENTS}}
    conversation = [
        *prompt,
        {"role": "assistant", "content": "", "tool_calls": [structured]},
        {"role": "tool", "name": "calculator", "content": "287663"},
        {"role": "assistant", "content": "287663"},
    ]
    rendered = tokenizer.apply_chat_template(conversation, tools=TOOLS, tokenize=False)
    rollout = tokenizer.decode(ids + out.completion_ids[0][out.attention[0].bool()].tolist())
    assert rendered.startswith(rollout) and rendered[len(rollout) :].strip() == ""
    tool_turn = tokenizer.decode(out.completion_ids[0][out.attention[0].bool() & ~out.completion_mask[0].bool()])
    assert "287663" in tool_turn and call not in tool_turn  # the tool's turn is the masked part


def test_a_template_that_rewrites_earlier_turns_is_refused_in_one_line():
    tokenizer = model_tokenizer("qwen3", ("<|im_start|>", "<|im_end|>", "<|endoftext|>"))
    call = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "347 * 829"}}\n</tool_call>'
    try:
        sample(tokenizer, "<|im_end|>", call, "hermes")
    except DataError as error:
        assert "not prefix-stable" in str(error) and "\n" not in str(error)
    else:  # a Qwen3 template that keeps earlier turns as they were: then it renders as the others
        pytest.skip("this TRL's Qwen3 template is prefix-stable for tool turns")


def test_sft_labels_under_qwens_template_cover_the_call_and_the_answer():
    tokenizer = model_tokenizer("qwen2_5", MODELS["qwen2_5"][0])
    structured = {"type": "function", "function": {"name": "calculator", "arguments": ARGUMENTS}}
    conversation = [
        {"role": "user", "content": "What is 347 * 829?"},
        {"role": "assistant", "content": "", "tool_calls": [structured]},
        {"role": "tool", "name": "calculator", "content": "287663"},
        {"role": "assistant", "content": "287663"},
    ]
    sft = tokenize_conversation(tokenizer, conversation, chat_template=tokenizer.chat_template, tools=TOOLS)
    trained = tokenizer.decode([t for t, label in zip(sft.input_ids, sft.labels) if label != -100])
    assert '<tool_call>\n{"name": "calculator", "arguments": {"expression": "347 * 829"}}\n</tool_call>' in trained
    assert "287663<|im_end|>" in trained and "<tool_response>" not in trained
