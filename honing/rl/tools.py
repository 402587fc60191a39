"""The tool registry and the tool box a multi-turn rollout calls: a name → a Python function (a built-in of
``honing.rl.builtin_tools``, one registered with ``register_tool``, or ``package.module:function``), its JSON schema
for the chat template (transformers' ``get_json_schema``: type hints and a Google-style docstring, as TRL's tools),
and calls that never crash the run.

A call that names no known tool, gives the wrong arguments, raises, or runs past ``timeout`` seconds answers the
model with an error message instead (TRL's ``{"error": ...}``) and counts as a failure; an answer is cut to
``max_response_length`` characters (verl's ``max_tool_response_length``). A call that times out keeps running in
its daemon thread: Python cannot stop a thread, and a process per call would cost more than most tools take.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from honing.errors import ConfigError
from honing.rl.builtin_tools import BUILTIN_TOOLS
from honing.rl.imports import known_or_imported, register_in

ToolFn = Callable[..., Any]

#: every tool known by name
TOOLS: dict[str, ToolFn] = dict(BUILTIN_TOOLS)


def register_tool(name: str) -> Callable[[ToolFn], ToolFn]:
    """Decorator: make ``fn`` available as ``grpo.tools: [NAME]``."""
    return register_in(TOOLS, name)


def resolve_tool(name: str, *, key: str = "grpo.tools") -> ToolFn:
    """The function a tool name stands for: registered, or imported from ``package.module:function``."""
    return known_or_imported(TOOLS, name, key=key, kind="tool")


def tool_schema(fn: ToolFn, *, key: str) -> dict[str, Any]:
    """The function's JSON schema as chat templates take it (``{"type": "function", "function": {...}}``)."""
    from transformers.utils import get_json_schema
    from transformers.utils.chat_template_utils import DocstringParsingException, TypeHintParsingException

    try:
        return get_json_schema(fn)
    except (DocstringParsingException, TypeHintParsingException) as error:
        raise ConfigError(
            f"{key}: tool {getattr(fn, '__name__', fn)!r} has no JSON schema ({error}); give every argument a "
            "type hint and the function a Google-style docstring with an Args: section"
        ) from None


@dataclass(frozen=True)
class ToolCall:
    """One call the model wrote: the tool's name and its arguments (``error``: why the call could not be read)."""

    name: str
    arguments: dict[str, Any]
    error: str | None = None


@dataclass(frozen=True)
class ToolAnswer:
    """What a call gives back to the model: the tool message's text, and whether the call failed."""

    name: str
    content: str
    failed: bool


class ToolBox:
    """The run's tools by name, called with a timeout, their answers cut to ``max_response_length`` characters."""

    def __init__(self, tools: dict[str, ToolFn], *, timeout: float, max_response_length: int):
        self.tools = dict(tools)
        self.timeout = float(timeout)
        self.max_response_length = int(max_response_length)

    @classmethod
    def from_names(
        cls, names: Sequence[str], *, timeout: float, max_response_length: int, key: str = "grpo.tools"
    ) -> ToolBox:
        """The tools ``names`` stands for (the config's ``key``), each under its function's name."""
        tools: dict[str, ToolFn] = {}
        for index, name in enumerate(names):
            fn = resolve_tool(name, key=f"{key}[{index}]")
            called = tool_schema(fn, key=f"{key}[{index}]")["function"]["name"]
            if called in tools:
                raise ConfigError(f"{key}[{index}]: a second tool named {called!r}; tool names must differ")
            tools[called] = fn
        return cls(tools, timeout=timeout, max_response_length=max_response_length)

    def schemas(self) -> list[dict[str, Any]]:
        """The tools' JSON schemas, in the order given."""
        return [tool_schema(fn, key="grpo.tools") for fn in self.tools.values()]

    def call_all(self, calls: Sequence[ToolCall]) -> list[ToolAnswer]:
        """Every call of one assistant turn, run at once (each in its own thread), answered in order."""
        runs = [_Run(self.tools.get(call.name), call) for call in calls]
        for run in runs:
            run.start()
        deadline = _Deadline(self.timeout)
        return [self._answer(run, deadline.left()) for run in runs]

    def _answer(self, run: _Run, seconds: float) -> ToolAnswer:
        call = run.call
        if call.error is not None:
            return self._failed(call.name, call.error)
        if run.fn is None:
            known = ", ".join(sorted(self.tools)) or "none"
            return self._failed(call.name, f"unknown tool {call.name!r}; the tools are: {known}")
        run.join(seconds)
        if run.is_alive():
            return self._failed(call.name, f"tool {call.name!r} timed out after {self.timeout:g} s")
        if run.error is not None:
            return self._failed(call.name, f"{type(run.error).__name__}: {run.error}")
        return ToolAnswer(call.name, self._cut(_as_text(run.result)), failed=False)

    def _failed(self, name: str, message: str) -> ToolAnswer:
        return ToolAnswer(name, self._cut(json.dumps({"error": message})), failed=True)

    def _cut(self, text: str) -> str:
        limit = self.max_response_length
        return text if len(text) <= limit else text[:limit] + "…"


class _Run(threading.Thread):
    """One tool call in a daemon thread (a call that never returns must not keep the process alive at exit)."""

    def __init__(self, fn: ToolFn | None, call: ToolCall):
        super().__init__(daemon=True, name=f"tool-{call.name}")
        self.fn, self.call = fn, call
        self.result: object = None
        self.error: BaseException | None = None

    def start(self) -> None:
        """Run the call unless it cannot be made (no such tool, or arguments that could not be read)."""
        if self.fn is not None and self.call.error is None:
            super().start()

    def run(self) -> None:
        try:
            self.result = self.fn(**self.call.arguments)
        except BaseException as error:  # a tool's failure is the model's to see, whatever it raised
            self.error = error


class _Deadline:
    """Seconds left of one timeout shared by the calls of a turn, which run at the same time."""

    def __init__(self, seconds: float):
        self._end = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds until the deadline (0 once past)."""
        return max(0.0, self._end - time.monotonic())


def _as_text(result: object) -> str:
    """A tool's return value as the tool message's text: strings as they are, anything else as JSON."""
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result)
    except (TypeError, ValueError):
        return str(result)
