"""The GRPO recipe's multi-turn tool use (``grpo.tools``): the tool box, the conversation sampler the train module
runs (``honing.methods.tool_turns``), the schemas shown with prompts, and what tool use cannot be combined with,
refused in one line."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from honing.errors import ConfigError
from honing.methods.tool_turns import ToolTurns
from honing.rl.tool_calls import detect_tool_call_format
from honing.rl.tools import ToolBox
from honing.run.parts import ModelAssets

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from honing.config import RunConfig
    from honing.config.rloo_schema import RLOOSection
    from honing.config.tool_use_schema import ToolUseSection


def wants_tools(section: ToolUseSection | RLOOSection) -> bool:
    """Whether the method's section names tools (RLOO's has no tool keys)."""
    return bool(getattr(section, "tools", None))


def refuse_unsupported_tool_use(config: RunConfig, section: ToolUseSection | RLOOSection) -> None:
    """A ConfigError where tools meet the generation eval, which answers in one turn (the GRPO validation pass runs
    the tools); image prompts with tools are refused by the method table (``honing.config.methods``)."""
    if not wants_tools(section):
        return
    if config.callbacks.generation_eval.enabled:
        raise ConfigError(
            f"callbacks.generation_eval answers in one turn and cannot run {config.method}.tools; evaluate with "
            "data.validation (GRPO's validation pass samples conversations with the tools) and set "
            "callbacks.generation_eval.enabled: false"
        )


def tool_box(section: ToolUseSection, method: str) -> ToolBox | None:
    """The run's tools (``<method>.tools``), or None without them."""
    if not wants_tools(section):
        return None
    return ToolBox.from_names(
        section.tools,
        timeout=section.tool_timeout,
        max_response_length=section.max_tool_response_length,
        key=f"{method}.tools",
    )


def tool_schemas(
    section: ToolUseSection, method: str, tokenizer: PreTrainedTokenizerBase
) -> list[dict[str, Any]] | None:
    """The tools' JSON schemas shown with the prompts (checked to be shown: a template without tools refused)."""
    box = tool_box(section, method)
    if box is None:
        return None
    schemas = box.schemas()
    check_template_shows_tools(tokenizer, schemas, key=f"{method}.tools")
    return schemas


def check_template_shows_tools(
    tokenizer: PreTrainedTokenizerBase, schemas: list[dict[str, Any]], *, key: str = "grpo.tools"
) -> None:
    """A ConfigError when the chat template renders a prompt the same with tools as without: the model would never
    see them."""
    probe = [{"role": "user", "content": "?"}]
    plain = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
    shown = tokenizer.apply_chat_template(probe, tools=schemas, tokenize=False, add_generation_prompt=True)
    if shown == plain:
        raise ConfigError(
            f"{key}: the chat template does not show tools to the model (a prompt renders the same with them); "
            "use data.chat_template: chatml or a tokenizer whose own template renders tools"
        )


def tool_turns(
    assets: ModelAssets,
    section: ToolUseSection,
    method: str,
    stop_token_ids: Sequence[int],
    template_kwargs: Mapping[str, Any] | None = None,
) -> ToolTurns | None:
    """The conversation sampler of a run with tools, or None (one assistant turn per completion);
    ``template_kwargs``: ``data.chat_template_kwargs``, given at each rendering of a tool turn."""
    box = tool_box(section, method)
    if box is None:
        return None
    tokenizer = assets.tokenizer
    format = section.tool_call_format
    if format == "auto":
        template = assets.chat_template if isinstance(assets.chat_template, str) else ""
        format = detect_tool_call_format(
            getattr(tokenizer, "chat_template", None) or template, key=f"{method}.tool_call_format"
        )
    turns = ToolTurns(
        box,
        tokenizer=tokenizer,
        tool_call_format=format,
        max_turns=section.max_turns,
        max_completion_length=section.max_completion_length,
        stop_token_ids=stop_token_ids,
        pad_token_id=tokenizer.pad_token_id,
        template_kwargs=template_kwargs,
    )
    # a template that cannot append tool turns to sampled tokens fails here, not at the first rollout
    turns.tool_turn_ids([{"role": "tool", "name": next(iter(box.tools)), "content": "0"}])
    return turns
