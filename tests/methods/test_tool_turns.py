"""Multi-turn rollouts with a scripted policy: tool calls run and their answers appended as tool turns (masked from
the loss, attended), the conversation the rewards see, the tokens equal to the chat template's rendering of the same
conversation (what SFT trains on), and the limits: max_turns, the token budget, turns cut short."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

from honing.config import validate
from honing.data.chat.chat_tokenizer import chat_tokenizer
from honing.data.chat.conversation import tokenize_conversation
from honing.errors import DataError
from honing.methods.tool_turns import ToolTurns, transcript_text, turn_seed
from honing.rl.builtin_tools import calculator
from honing.rl.tools import ToolBox, tool_schema
from tests.recipes.test_grpo import grpo_raw

CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "347 * 829"}}</tool_call>'
TOOLS = [tool_schema(calculator, key="test")]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    config = validate(grpo_raw(tmp_path_factory.mktemp("tok")))
    tok, _ = chat_tokenizer(config.tokenizer, config.data, config.model)
    return tok


class ScriptedPolicy:
    """A train module whose ``sample`` answers each turn's rows from a script: ``script[call][row]`` is a text (a
    turn that ends with ``<|im_end|>``, unless it ends in ``...``, then it is cut there)."""

    def __init__(self, tokenizer, script):
        self.tokenizer, self.script = tokenizer, script
        self.end_token = "<|im_end|>"  # the token that ends a scripted turn
        self.device = torch.device("cpu")
        self.model = torch.nn.Linear(1, 1)
        self.calls = []

    def sample(self, batch, prompt_ids, prompt_mask, seeds, **sampling):
        texts = self.script[len(self.calls)]
        self.calls.append(SimpleNamespace(ids=prompt_ids, mask=prompt_mask, seeds=list(seeds), sampling=sampling))
        assert len(texts) == len(prompt_ids)
        turns = []
        for text in texts:
            ids = self.tokenizer(text.removesuffix("..."), add_special_tokens=False)["input_ids"]
            ended = [] if text.endswith("...") else [self.tokenizer.convert_tokens_to_ids(self.end_token)]
            turns.append((ids + ended)[: sampling["max_new_tokens"]])
        width = max(len(t) for t in turns)
        out = torch.full((len(turns), width), self.tokenizer.pad_token_id)
        mask = torch.zeros((len(turns), width), dtype=torch.long)
        for row, turn in enumerate(turns):
            out[row, : len(turn)] = torch.tensor(turn)
            mask[row, : len(turn)] = 1
        return out, mask


def prompts_of(tokenizer, questions):
    prompts = [[{"role": "user", "content": q}] for q in questions]
    rows = [tokenizer.apply_chat_template(p, tools=TOOLS, add_generation_prompt=True, tokenize=False) for p in prompts]
    ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in rows]
    width = max(len(i) for i in ids)
    prompt_ids = torch.full((len(ids), width), tokenizer.pad_token_id)
    prompt_mask = torch.zeros((len(ids), width), dtype=torch.long)
    for row, i in enumerate(ids):
        prompt_ids[row, width - len(i) :] = torch.tensor(i)
        prompt_mask[row, width - len(i) :] = 1
    return prompts, prompt_ids, prompt_mask, ids


def turns(tokenizer, *, max_turns=3, max_completion_length=200, timeout=5.0):
    stop = [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    return ToolTurns(
        ToolBox({"calculator": calculator}, timeout=timeout, max_response_length=100),
        tokenizer=tokenizer,
        tool_call_format="hermes",
        max_turns=max_turns,
        max_completion_length=max_completion_length,
        stop_token_ids=stop,
        pad_token_id=tokenizer.pad_token_id,
    )


def test_a_tool_call_is_run_and_the_conversation_goes_on_with_the_answer_masked_from_the_loss(tokenizer):
    prompts, prompt_ids, prompt_mask, ids = prompts_of(tokenizer, ["What is 347 * 829?", "What is 2 * 3?"])
    policy = ScriptedPolicy(tokenizer, [[CALL, "6"], ["287663"]])
    out = turns(tokenizer).sample(policy, {}, prompts, prompt_ids, prompt_mask, [11, 12], temperature=1.0)

    # the second turn was sampled for the first row only, from prompt + call + tool turn, with the turn's own seed
    assert len(policy.calls) == 2 and policy.calls[1].seeds == [turn_seed(11, 1)]
    assert policy.calls[0].seeds == [11, 12] and policy.calls[0].sampling["temperature"] == 1.0
    second = policy.calls[1].ids[0][policy.calls[1].mask[0].bool()].tolist()
    first_turn = tokenizer(CALL + "<|im_end|>", add_special_tokens=False)["input_ids"]
    tool_turn = tokenizer("\n<|im_start|>tool\n287663<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    assert second == ids[0] + first_turn + tool_turn["input_ids"]

    # the completion: every turn's tokens; the loss on the policy's only; every token attended
    answer = tokenizer("287663<|im_end|>", add_special_tokens=False)["input_ids"]
    row = out.attention[0].bool()
    assert out.completion_ids[0][row].tolist() == first_turn + tool_turn["input_ids"] + answer
    assert out.completion_mask[0][row].tolist() == [1] * len(first_turn) + [0] * len(tool_turn["input_ids"]) + [
        1
    ] * len(answer)
    assert out.completion_mask[1].sum() == out.attention[1].sum() == len(tokenizer("6")["input_ids"]) + 1
    assert out.tool_counts.tolist() == [[1, 0], [0, 0]]
    assert out.completions[0] == [
        {"role": "assistant", "content": CALL},
        {"role": "tool", "name": "calculator", "content": "287663"},
        {"role": "assistant", "content": "287663"},
    ]
    assert out.completions[1] == [{"role": "assistant", "content": "6"}]
    assert out.texts[0] == transcript_text(out.completions[0]) == f"{CALL}\n[tool calculator] 287663\n287663"


def test_the_sampled_tokens_are_the_chat_templates_rendering_of_the_conversation(tokenizer):
    """What the rollout trains on is what SFT on the same conversation (with tools) reads, so a policy fine-tuned on
    tool conversations samples in the format it learned."""
    prompts, prompt_ids, prompt_mask, ids = prompts_of(tokenizer, ["What is 347 * 829?"])
    out = turns(tokenizer).sample(
        ScriptedPolicy(tokenizer, [[CALL], ["287663"]]), {}, prompts, prompt_ids, prompt_mask, [0]
    )
    call = {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "347 * 829"}}}
    conversation = [
        *prompts[0],
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "calculator", "content": "287663"},
        {"role": "assistant", "content": "287663"},
    ]
    sft = tokenize_conversation(tokenizer, conversation, chat_template=tokenizer.chat_template, tools=TOOLS)
    rollout = ids[0] + out.completion_ids[0][out.attention[0].bool()].tolist()
    newline = tokenizer("\n", add_special_tokens=False)["input_ids"]
    assert sft.input_ids == rollout + newline  # the template's newline after the last turn, never sampled
    trained = [label != -100 for label in sft.labels[len(ids[0]) :]]
    assert trained[: len(rollout) - len(ids[0])] == out.completion_mask[0][out.attention[0].bool()].bool().tolist()


def test_limits_end_a_conversation_without_running_what_cannot_be_answered(tokenizer, caplog):
    prompts, prompt_ids, prompt_mask, _ = prompts_of(tokenizer, ["a", "b", "c"])
    # a cut turn (no end token) is not run; at max_turns a call is the last turn, not run either
    policy = ScriptedPolicy(tokenizer, [[CALL + "...", CALL, "7"], [CALL]])
    out = turns(tokenizer, max_turns=2, max_completion_length=300).sample(
        policy, {}, prompts, prompt_ids, prompt_mask, [1, 2, 3]
    )
    assert out.tool_counts.tolist() == [[0, 0], [1, 0], [0, 0]]
    assert [len(c) for c in out.completions] == [1, 3, 1]
    assert out.completions[1][-1] == {"role": "assistant", "content": CALL}
    # a tool answer that leaves no room for a reply in max_completion_length is not appended
    budget = len(tokenizer(CALL + "<|im_end|>")["input_ids"]) + 5
    policy = ScriptedPolicy(tokenizer, [[CALL, "1", "2"]])
    out = turns(tokenizer, max_completion_length=budget).sample(policy, {}, prompts, prompt_ids, prompt_mask, [0] * 3)
    assert len(policy.calls) == 1 and out.tool_counts[0].tolist() == [1, 0]
    assert out.completions[0] == [{"role": "assistant", "content": CALL}]
    assert int(out.attention[0].sum()) == budget - 5
    assert policy.calls[0].sampling["max_new_tokens"] == budget
    warnings = [r.getMessage() for r in caplog.records if "left no room for a tool's answer" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith(f"grpo.max_completion_length ({budget} tokens)")


def test_a_failing_call_answers_with_an_error_and_plain_text_prompts_are_refused(tokenizer):
    prompts, prompt_ids, prompt_mask, _ = prompts_of(tokenizer, ["a"])
    bad = '<tool_call>{"name": "calculator", "arguments": {"expression": "x"}}</tool_call>'
    out = turns(tokenizer).sample(ScriptedPolicy(tokenizer, [[bad], ["?"]]), {}, prompts, prompt_ids, prompt_mask, [0])
    assert out.tool_counts.tolist() == [[1, 1]]
    assert out.completions[0][1]["content"].startswith('{"error": "ValueError:')
    with pytest.raises(DataError, match="tool calls need chat prompts"):
        turns(tokenizer).sample(ScriptedPolicy(tokenizer, []), {}, ["text"], prompt_ids, prompt_mask, [0])


def test_the_tool_turn_is_rendered_with_data_chat_template_kwargs(tokenizer):
    """A template variable (Qwen3's enable_thinking, reduced) shapes the tokens appended after a tool answer."""
    thinking = copy.deepcopy(tokenizer)
    off_switch = "add_generation_prompt and enable_thinking is defined and not enable_thinking"
    thinking.chat_template += "{% if " + off_switch + " %}<think></think>{% endif %}"
    replies = [{"role": "tool", "name": "calculator", "content": "6"}]
    plain = turns(thinking)
    box = ToolBox({"calculator": calculator}, timeout=5.0, max_response_length=100)
    off = ToolTurns(
        box,
        tokenizer=thinking,
        tool_call_format="hermes",
        max_turns=3,
        max_completion_length=200,
        stop_token_ids=plain.stop_token_ids,
        pad_token_id=thinking.pad_token_id,
        template_kwargs={"enable_thinking": False},
    )
    expected = thinking.decode(plain.tool_turn_ids(replies)) + "<think></think>"
    assert thinking.decode(off.tool_turn_ids(replies)) == expected
