"""Conversations to token ids and labels, with the loss on the assistant turns only (or on everything)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from honing.data.chat.templates import (
    NAMED_TEMPLATES,
    NAMED_TEMPLATES_PLAIN,
    TEMPLATE_SPECIAL_TOKENS,
    has_generation_markers,
)
from honing.errors import ConfigError, DataError
from honing.losses import IGNORE_INDEX

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

Messages = Sequence[dict[str, Any]]
TRAIN_ON = ("assistant", "all")
LENGTH_POLICIES = ("truncate", "drop")


@dataclass
class TokenizedExample:
    """One row's token ids and labels (IGNORE_INDEX where there is no loss), aligned position by position."""

    input_ids: list[int]
    labels: list[int]


def own_template(tokenizer: PreTrainedTokenizerBase) -> str | None:
    """The tokenizer's own chat template (a hub tokenizer may ship several by name: its ``default``), or None."""
    own = getattr(tokenizer, "chat_template", None)
    if isinstance(own, dict):
        own = own.get("default")
    return own or None


def resolve_chat_template(tokenizer: PreTrainedTokenizerBase, chat_template: str | None) -> str:
    """The Jinja text for ``chat_template``: the tokenizer's own (None), a named template, or inline Jinja."""
    if chat_template is None:
        own = own_template(tokenizer)
        if own is None:
            raise ConfigError(
                "data.chat_template is not set and the tokenizer has no chat template of its own; "
                f"set data.chat_template to a named template ({', '.join(NAMED_TEMPLATES)}) "
                "or to an inline Jinja template"
            )
        template = own
    elif chat_template in NAMED_TEMPLATES:
        return NAMED_TEMPLATES[chat_template]
    elif "{{" not in chat_template and "{%" not in chat_template:
        # Without any Jinja tag the string would render itself verbatim for every row: surely a mistyped name.
        close = difflib.get_close_matches(chat_template, list(NAMED_TEMPLATES), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(
            f"data.chat_template {chat_template!r} is neither a named template "
            f"({', '.join(NAMED_TEMPLATES)}) nor an inline Jinja template (it has no '{{{{' or '{{%')"
            f"{hint}"
        )
    else:
        template = chat_template
    _check_syntax(template)
    return template


def ensure_special_tokens(tokenizer: PreTrainedTokenizerBase, template_name_or_text: str | None) -> int:
    """Add a named template's special tokens the tokenizer lacks; return how many were added (resize embeddings)."""
    name = _template_name(template_name_or_text)
    if name is None:
        return 0  # an inline or the tokenizer's own template: its tokens are the tokenizer's business
    from tokenizers import AddedToken

    vocab = tokenizer.get_vocab()
    missing = [token for token in TEMPLATE_SPECIAL_TOKENS[name] if token not in vocab]
    if not missing:
        return 0
    # normalized=False: the token must match the raw text the template writes, whatever the normalizer does.
    return tokenizer.add_tokens(
        [AddedToken(token, special=True, normalized=False) for token in missing], special_tokens=True
    )


def render_chat(
    tokenizer: PreTrainedTokenizerBase,
    messages: Messages,
    *,
    chat_template: str,
    add_generation_prompt: bool = False,
    tools: list[dict[str, Any]] | None = None,
) -> str:
    """``messages`` rendered as text by ``chat_template`` (a name or Jinja text), as apply_chat_template does (with
    ``tools``: the JSON schemas the template shows the model)."""
    from jinja2.exceptions import TemplateError
    from transformers.utils.chat_template_utils import render_jinja_template

    template = NAMED_TEMPLATES.get(chat_template, chat_template)
    # The same inputs apply_chat_template gives the template: None-valued keys dropped, special tokens as variables.
    conversation = [{key: value for key, value in message.items() if value is not None} for message in messages]
    try:
        rendered, _ = render_jinja_template(
            conversations=[conversation],
            chat_template=template,
            add_generation_prompt=add_generation_prompt,
            tools=tools or None,
            **tokenizer.special_tokens_map,
        )
    except TemplateError as error:
        raise DataError(f"the chat template could not render the conversation: {error}") from error
    return rendered[0]


def tokenize_prompt(tokenizer: PreTrainedTokenizerBase, messages: Messages, *, chat_template: str) -> list[int]:
    """Token ids of ``messages`` followed by the assistant header, ready for the model to generate the reply."""
    text = render_chat(tokenizer, messages, chat_template=chat_template, add_generation_prompt=True)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def tokenize_conversation(
    tokenizer: PreTrainedTokenizerBase,
    messages: Messages,
    *,
    chat_template: str,
    train_on: Literal["assistant", "all"] = "assistant",
    tools: list[dict[str, Any]] | None = None,
) -> TokenizedExample:
    """Token ids of the rendered conversation (with the ``tools`` it may call); labels on every assistant turn's
    content and end-of-turn token."""
    if train_on not in TRAIN_ON:
        raise ConfigError(f"train_on must be one of {', '.join(TRAIN_ON)}, got {train_on!r}")
    if not messages:
        raise DataError("the conversation has no messages; expected at least one")
    if not getattr(tokenizer, "is_fast", False):
        raise ConfigError(
            f"assistant-only labels need a fast (Rust) tokenizer for character offsets, got {type(tokenizer).__name__}"
        )
    template = NAMED_TEMPLATES.get(chat_template, chat_template)
    if has_generation_markers(template):
        input_ids, mask = _mask_from_generation_markers(tokenizer, messages, template, tools)
    else:
        input_ids, mask = _mask_from_prefix_rendering(tokenizer, messages, template, tools)
    if train_on == "all":
        return TokenizedExample(input_ids=input_ids, labels=list(input_ids))
    labels = [token if trained else IGNORE_INDEX for token, trained in zip(input_ids, mask)]
    return TokenizedExample(input_ids=input_ids, labels=labels)


def tokenize_plain_text(tokenizer: PreTrainedTokenizerBase, text: str) -> TokenizedExample:
    """``text`` followed by eos, with the loss on every token."""
    if tokenizer.eos_token_id is None:
        raise ConfigError("the tokenizer has no eos token; plain-text rows need one to mark where a text ends")
    input_ids = [*tokenizer(text, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
    return TokenizedExample(input_ids=input_ids, labels=list(input_ids))


def fit_to_length(
    example: TokenizedExample, max_length: int, policy: Literal["truncate", "drop"]
) -> TokenizedExample | None:
    """``example`` if it fits in ``max_length``; else its first ``max_length`` tokens (truncate) or None (drop)."""
    if policy not in LENGTH_POLICIES:
        raise ConfigError(f"the over-length policy must be one of {', '.join(LENGTH_POLICIES)}, got {policy!r}")
    if max_length < 1:
        raise ConfigError(f"max_length must be a positive number of tokens, got {max_length}")
    if len(example.input_ids) <= max_length:
        return example
    if policy == "drop":
        return None
    return TokenizedExample(input_ids=example.input_ids[:max_length], labels=example.labels[:max_length])


def has_trainable_tokens(example: TokenizedExample) -> bool:
    """Whether any label carries a loss (a row without one trains nothing and should be reported)."""
    return any(label != IGNORE_INDEX for label in example.labels)


def _mask_from_generation_markers(
    tokenizer: PreTrainedTokenizerBase, messages: Messages, template: str, tools: list[dict[str, Any]] | None = None
) -> tuple[list[int], list[int]]:
    from jinja2.exceptions import TemplateError

    try:
        encoding = tokenizer.apply_chat_template(
            list(messages),
            chat_template=template,
            tools=tools or None,
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
        )
    except TemplateError as error:
        raise DataError(f"the chat template could not render the conversation: {error}") from error
    return list(encoding["input_ids"]), list(encoding["assistant_masks"])


def _mask_from_prefix_rendering(
    tokenizer: PreTrainedTokenizerBase, messages: Messages, template: str, tools: list[dict[str, Any]] | None = None
) -> tuple[list[int], list[int]]:
    """Assistant spans as the text each assistant turn adds to the rendering of the turns before it."""
    full = render_chat(tokenizer, messages, chat_template=template, tools=tools)
    separator = _trailing_separator_pattern(tokenizer)
    spans = []
    # Two renders per assistant turn: quadratic in turns, but rendering is cheap next to training on the row.
    for index, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        prompt = render_chat(
            tokenizer, messages[:index], chat_template=template, add_generation_prompt=True, tools=tools
        )
        through = render_chat(tokenizer, messages[: index + 1], chat_template=template, tools=tools)
        if not through.startswith(prompt) or not full.startswith(through):
            raise DataError(
                f"the chat template is not prefix-stable: rendering the conversation up to message "
                f"{index} (role 'assistant') is not a prefix of rendering the whole conversation, so "
                "its assistant tokens cannot be found; use a template with {% generation %} markers "
                f"(e.g. data.chat_template: {' or '.join(NAMED_TEMPLATES)})"
            )
        spans.append((len(prompt), _span_end(through, len(prompt), separator)))
    encoding = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    # A token is trained when it overlaps a span: the same rule as transformers' char_to_token on the span's ends.
    mask = [
        int(any(start < span_end and end > span_start for span_start, span_end in spans))
        for start, end in encoding["offset_mapping"]
    ]
    return list(encoding["input_ids"]), mask


def _trailing_separator_pattern(tokenizer: PreTrainedTokenizerBase) -> re.Pattern[str] | None:
    """Matches a special token followed only by whitespace, at the end of a text."""
    specials = [token.content for token in tokenizer.added_tokens_decoder.values() if token.special]
    if not specials:
        return None
    alternatives = "|".join(re.escape(token) for token in sorted(specials, key=len, reverse=True))
    return re.compile(f"(?:{alternatives})(\\s+)\\Z")


def _span_end(rendered: str, span_start: int, separator: re.Pattern[str] | None) -> int:
    # Whitespace a template writes after the end-of-turn token (ChatML's "\n" after <|im_end|>) only separates
    # turns; generation stops at the end-of-turn token and never produces it, so it gets no loss. The named
    # templates keep it outside their {% generation %} block, which makes both paths give the same labels.
    if separator is not None:
        found = separator.search(rendered, span_start)
        if found is not None:
            return found.start(1)
    return len(rendered)


def _template_name(template_name_or_text: str | None) -> str | None:
    if template_name_or_text in NAMED_TEMPLATES:
        return template_name_or_text
    for name in NAMED_TEMPLATES:
        if template_name_or_text in (NAMED_TEMPLATES[name], NAMED_TEMPLATES_PLAIN[name]):
            return name
    return None


def _check_syntax(template: str) -> None:
    from jinja2.exceptions import TemplateSyntaxError

    # The compiler apply_chat_template uses (cached), so the {% generation %} tag parses exactly as it will later.
    from transformers.utils.chat_template_utils import _compile_jinja_template

    try:
        _compile_jinja_template(template)
    except TemplateSyntaxError as error:
        raise ConfigError(
            f"data.chat_template is not a valid Jinja template: {error.message} (template line {error.lineno})"
        ) from error
