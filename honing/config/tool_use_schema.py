"""The keys of multi-turn tool use, shared by the ``grpo`` and ``rloo`` sections (their rollouts are the same)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from honing.config.section import Section

#: the keys that only tool calls read
TOOL_KEYS = frozenset({"max_turns", "tool_timeout", "max_tool_response_length", "tool_call_format"})


class ToolUseSection(Section):
    """Multi-turn tool use in a GRPO-family rollout (``grpo.tools``, ``rloo.tools``): a completion is a conversation
    in which the policy's tool calls run and their answers come back as tool turns."""

    tools: list[str] = Field(default_factory=list)
    """Multi-turn tool use: the tools the policy may call in a rollout, built-in names (``calculator``) or
    ``package.module:function`` (type hints and a docstring make each one's JSON schema, shown with every prompt whose
    row has no ``tools`` column). A completion is then a conversation: tool calls run, their answers appended as tool
    turns (masked from the loss), up to ``max_turns`` assistant turns."""
    max_turns: int = Field(default=4, ge=1)
    """With ``tools``: the most assistant turns a completion has (the last one's tool calls are not run)."""
    tool_timeout: float = Field(default=10.0, gt=0)
    """With ``tools``: seconds a tool call may run; past it the model gets an error message instead of the answer."""
    max_tool_response_length: int = Field(default=2000, ge=1)
    """With ``tools``: a tool answer is cut to this many characters (verl's name)."""
    tool_call_format: Literal["auto", "hermes", "json"] = "auto"
    """With ``tools``: how tool calls are written: ``hermes`` ``<tool_call>{...}</tool_call>`` blocks (Qwen, Hermes,
    honing's ``chatml``), ``json`` a turn that is one ``{"name", "parameters"}`` object (Llama 3); ``auto`` reads it
    from the chat template."""

    @model_validator(mode="after")
    def _tool_keys_need_tools(self) -> ToolUseSection:
        fields = type(self).model_fields
        unused = [] if self.tools else [key for key in sorted(TOOL_KEYS) if getattr(self, key) != fields[key].default]
        if unused:
            raise ValueError(f"{', '.join(unused)} apply to tool calls only; set tools or remove them")
        return self
