"""Tool calls read from an assistant turn's text, in the chat template's tool-call format:

- ``hermes``: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks, any number (Qwen2.5 / Qwen3,
  Hermes, and honing's ``chatml`` template);
- ``json``: the whole turn one JSON object ``{"name": ..., "parameters": {...}}`` (Llama 3.1 / 3.2's custom tool
  calls; ``arguments`` is read too).

A block that is there but cannot be read (bad JSON, no name, arguments that are not an object) is a call with an
``error``: the model is told so, as a tool that raised would tell it.
"""

from __future__ import annotations

import json
import re

from honing.errors import ConfigError
from honing.rl.tools import ToolCall

TOOL_CALL_FORMATS = ("hermes", "json")
_HERMES_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def parse_tool_calls(text: str, format: str) -> list[ToolCall]:
    """The calls an assistant turn's ``text`` makes in ``format`` (none: the turn is a final answer)."""
    if format == "hermes":
        return [_read_call(body, "arguments") for body in _HERMES_BLOCK.findall(text)]
    if format == "json":
        body = text.strip()
        if not (body.startswith("{") and body.endswith("}")):
            return []
        call = _read_call(body, "parameters")
        # a JSON answer that is not a call (no "name" key) is an answer, not a failed call
        return [] if call.error is not None and not _names_a_tool(body) else [call]
    raise ValueError(f"unknown tool-call format {format!r}; expected one of: {', '.join(TOOL_CALL_FORMATS)}")


def detect_tool_call_format(chat_template: str, *, key: str = "grpo.tool_call_format") -> str:
    """The tool-call format a chat template (a name or Jinja text) renders tool calls in."""
    if chat_template == "chatml" or "<tool_call>" in chat_template:
        return "hermes"
    if chat_template == "llama3" or '"parameters"' in chat_template or "ipython" in chat_template:
        return "json"
    raise ConfigError(
        f"{key}: cannot tell the chat template's tool-call format; set it: one of {', '.join(TOOL_CALL_FORMATS)}"
    )


def _read_call(body: str, arguments_key: str) -> ToolCall:
    try:
        value = json.loads(body)
    except json.JSONDecodeError as error:
        return ToolCall("", {}, f"the tool call is not valid JSON ({error.msg} at character {error.pos})")
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        return ToolCall("", {}, 'the tool call needs a "name" (a string)')
    name = value["name"]
    arguments: object = value.get(arguments_key, value.get("arguments", value.get("parameters", {})))
    if isinstance(arguments, str):  # OpenAI's wire format: the arguments as a JSON string
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return ToolCall(name, {}, f'the "arguments" of {name!r} are not valid JSON')
    if not isinstance(arguments, dict):
        return ToolCall(name, {}, f'the "arguments" of {name!r} must be a JSON object')
    return ToolCall(name, arguments)


def _names_a_tool(body: str) -> bool:
    try:
        value = json.loads(body)
    except json.JSONDecodeError:
        return '"name"' in body
    return isinstance(value, dict) and "name" in value
