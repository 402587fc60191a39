"""Tools for multi-turn rollouts: the calculator, tool calls read in both formats, and a tool box whose failures
(unknown tool, bad arguments, a raise, a timeout) answer the model instead of stopping the run."""

from __future__ import annotations

import json
import time

import pytest

from honing.errors import ConfigError
from honing.rl import tools
from honing.rl.builtin_tools import calculator
from honing.rl.tool_calls import detect_tool_call_format, parse_tool_calls
from honing.rl.tools import ToolBox, ToolCall, register_tool, resolve_tool, tool_schema


def test_the_calculator_is_exact_and_refuses_what_is_not_arithmetic():
    assert calculator("347 * 829") == "287663"
    assert calculator("123456789 * 987654321") == str(123456789 * 987654321)  # no float rounding
    assert calculator("6 / 3") == "2"
    assert calculator("1 / 4") == "0.25"
    assert calculator("-(2 + 3) ** 2 % 7") == str(-((2 + 3) ** 2) % 7)
    for bad in ("__import__('os').system('true')", "x + 1", "2 ** 1000", "1 +", "[1, 2]"):
        with pytest.raises(ValueError):
            calculator(bad)


def test_hermes_blocks_are_read_with_object_or_string_arguments_and_bad_ones_are_failed_calls():
    text = (
        'Let me compute. <tool_call>{"name": "calculator", "arguments": {"expression": "2 * 3"}}</tool_call>\n'
        '<tool_call>\n{"name": "lookup", "arguments": "{\\"key\\": \\"a\\"}"}\n</tool_call>'
    )
    assert parse_tool_calls(text, "hermes") == [
        ToolCall("calculator", {"expression": "2 * 3"}),
        ToolCall("lookup", {"key": "a"}),
    ]
    assert parse_tool_calls("The answer is 6.", "hermes") == []
    (broken,) = parse_tool_calls('<tool_call>{"name": "calculator", "arguments": {</tool_call>', "hermes")
    assert broken.error.startswith("the tool call is not valid JSON")
    (nameless,) = parse_tool_calls('<tool_call>{"arguments": {}}</tool_call>', "hermes")
    assert nameless.error == 'the tool call needs a "name" (a string)'
    (listed,) = parse_tool_calls('<tool_call>{"name": "f", "arguments": [1]}</tool_call>', "hermes")
    assert listed.error == "the \"arguments\" of 'f' must be a JSON object"


def test_llama_json_calls_are_the_whole_turn_and_other_json_is_an_answer():
    call = '{"name": "calculator", "parameters": {"expression": "1 + 1"}}'
    assert parse_tool_calls(call, "json") == [ToolCall("calculator", {"expression": "1 + 1"})]
    assert parse_tool_calls('{"answer": 2}', "json") == []
    assert parse_tool_calls("It is 2.", "json") == []
    (broken,) = parse_tool_calls('{"name": "calculator", "parameters": {"expression": 1 + 1}}', "json")
    assert broken.error is not None


def test_the_format_is_read_from_the_chat_template():
    assert detect_tool_call_format("chatml") == "hermes"
    assert detect_tool_call_format("{{ '<tool_call>' }}") == "hermes"
    assert detect_tool_call_format("llama3") == "json"
    with pytest.raises(ConfigError, match="grpo.tool_call_format"):
        detect_tool_call_format("{{ messages }}")


def slow(seconds: float) -> str:
    """Sleep, then answer.

    Args:
        seconds: how long to sleep
    """
    time.sleep(seconds)
    return "awake"


def failing(reason: str) -> str:
    """Always raise.

    Args:
        reason: the error's message
    """
    raise RuntimeError(reason)


def structured(n: int) -> dict:
    """Answer with an object.

    Args:
        n: a number
    """
    return {"n": n, "square": n * n}


def test_every_failure_is_an_error_message_to_the_model_and_answers_are_cut():
    box = ToolBox(
        {"calculator": calculator, "slow": slow, "failing": failing, "structured": structured},
        timeout=0.3,
        max_response_length=12,
    )
    started = time.monotonic()
    answers = box.call_all(
        [
            ToolCall("calculator", {"expression": "2 * 21"}),
            ToolCall("calculator", {"formula": "1"}),  # a wrong argument name
            ToolCall("failing", {"reason": "disk full"}),
            ToolCall("slow", {"seconds": 30}),
            ToolCall("search", {"q": "x"}),  # no such tool
            ToolCall("", {}, error="the tool call is not valid JSON (x)"),
            ToolCall("structured", {"n": 12}),
        ]
    )
    assert time.monotonic() - started < 5  # the sleeping call was not waited for
    assert [a.failed for a in answers] == [False, True, True, True, True, True, False]
    assert answers[0].content == "42"
    assert answers[6].content == '{"n": 12, "s…'  # JSON, cut to 12 characters
    long_box = ToolBox(box.tools, timeout=0.3, max_response_length=500)
    messages = [
        json.loads(a.content)["error"]
        for a in long_box.call_all(
            [
                ToolCall("calculator", {"formula": "1"}),
                ToolCall("failing", {"reason": "disk full"}),
                ToolCall("slow", {"seconds": 30}),
                ToolCall("search", {}),
            ]
        )
    ]
    assert messages[0].startswith("TypeError: calculator() got an unexpected keyword argument 'formula'")
    assert messages[1] == "RuntimeError: disk full"
    assert messages[2] == "tool 'slow' timed out after 0.3 s"
    assert messages[3] == "unknown tool 'search'; the tools are: calculator, failing, slow, structured"


def test_tools_resolve_by_name_or_import_path_with_their_schemas(tmp_path, monkeypatch):
    (tmp_path / "my_tools.py").write_text(
        "def weather(city: str) -> str:\n"
        '    """The weather in a city.\n\n    Args:\n        city: its name\n    """\n'
        "    return 'sunny'\n\n"
        "def undocumented(x):\n    return x\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    box = ToolBox.from_names(["calculator", "my_tools:weather"], timeout=1, max_response_length=100)
    assert list(box.tools) == ["calculator", "weather"]
    assert [schema["function"]["name"] for schema in box.schemas()] == ["calculator", "weather"]
    assert box.schemas()[1]["function"]["parameters"]["properties"]["city"]["description"] == "its name"
    with pytest.raises(ConfigError, match=r"grpo.tools\[0\]: unknown tool 'calculater'"):
        ToolBox.from_names(["calculater"], timeout=1, max_response_length=1)
    with pytest.raises(ConfigError, match="cannot import tool 'my_tools:nothing'"):
        resolve_tool("my_tools:nothing")
    with pytest.raises(ConfigError, match="has no JSON schema"):
        ToolBox.from_names(["my_tools:undocumented"], timeout=1, max_response_length=1)
    with pytest.raises(ConfigError, match="a second tool named 'calculator'"):
        ToolBox.from_names(["calculator", "calculator"], timeout=1, max_response_length=1)


def test_a_registered_tool_is_known_by_its_name(monkeypatch):
    monkeypatch.setattr(tools, "TOOLS", dict(tools.TOOLS))  # the registry as it was after the test

    @register_tool("double_it")
    def double(n: int) -> int:
        """Twice n.

        Args:
            n: a number
        """
        return 2 * n

    assert resolve_tool("double_it") is double
    assert tool_schema(double, key="k")["function"]["name"] == "double"
