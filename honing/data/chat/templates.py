"""Named chat templates (ChatML, Llama-3, Zephyr, plain role lines, eos-separated), with and without
`{% generation %}` markers, and their special tokens."""

from __future__ import annotations

import re

# Matches `{% generation %}` / `{%- endgeneration -%}` in any whitespace-control spelling, like transformers does.
GENERATION_MARKER = re.compile(r"\{%-?\s*(?:end)?generation\s*-?%\}")

# Qwen2 / Qwen2.5 structure without Qwen's implicit default system prompt. The loss block is the assistant's
# content (and its tool calls) plus <|im_end|>; the newline after <|im_end|> stays outside it because it only
# separates turns: generation stops at <|im_end|> and never produces that newline. With ``tools`` (JSON schemas), a
# first system turn lists them, after the conversation's own system message, and says how to call one; tool calls are
# Hermes blocks <tool_call>{"name": ..., "arguments": {...}}</tool_call> (``honing.rl.tool_calls``) and a tool's
# answer is a ``tool`` turn. Without tools it renders as it always has.
_CHATML = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}"
    "{{- 'Tools, one JSON schema a line:\\n' }}"
    "{%- for tool in tools %}{{- tool | tojson }}{{- '\\n' }}{%- endfor %}"
    '{{- \'Call one with <tool_call>{"name": ..., "arguments": {...}}</tool_call>; '
    "its answer comes back in a tool turn.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if tools and loop.first and message['role'] == 'system' %}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- generation %}{{- message['content'] or '' }}"
    "{%- for call in message['tool_calls'] or [] %}"
    "{%- set function = call['function'] if call['function'] is defined else call %}"
    "{{- '<tool_call>{\"name\": ' + (function['name'] | tojson) + ', \"arguments\": ' }}"
    "{{- function['arguments'] if function['arguments'] is string else function['arguments'] | tojson }}"
    "{{- '}</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>' }}{%- endgeneration %}"
    "{{- '\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# Llama-3.1 structure without tools and without its "Cutting Knowledge Date" system preamble. <|begin_of_text|> is
# written literally rather than through bos_token so a tokenizer without a bos token still renders it.
_LLAMA3 = (
    "{{- '<|begin_of_text|>' }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{%- if message['role'] == 'assistant' %}"
    "{%- generation %}{{- message['content'] | trim + '<|eot_id|>' }}{%- endgeneration %}"
    "{%- else %}"
    "{{- message['content'] | trim + '<|eot_id|>' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)

# Zephyr's turns, "<|role|>\n" + content + eos + "\n", as Oumi's zephyr template writes them (for a base model
# without a template of its own); the loss block is the assistant's content and the eos that ends it.
_ZEPHYR = (
    "{%- for message in messages %}"
    "{{- '<|' + message['role'] + '|>\\n' }}"
    "{%- if message['role'] == 'assistant' %}"
    "{%- generation %}{{- message['content'] | trim + eos_token }}{%- endgeneration %}"
    "{%- else %}"
    "{{- message['content'] | trim + eos_token }}"
    "{%- endif %}"
    "{{- '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- endif %}"
)

# "ROLE: content" lines with no special tokens, Oumi's fallback ("default") for a tokenizer without a template
_PLAIN_ROLES = (
    "{%- for message in messages %}"
    "{{- message['role'] | upper + ': ' }}"
    "{%- if message['role'] == 'assistant' %}"
    "{%- generation %}{{- message['content'] | trim }}{%- endgeneration %}"
    "{%- else %}"
    "{{- message['content'] | trim }}"
    "{%- endif %}"
    "{%- if not loop.last %}{{- '\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '\\nASSISTANT: ' }}{%- endif %}"
)

# Each message's content followed by eos and nothing else, Oumi's gpt2 template (a model that never saw roles)
_EOS_SEPARATED = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{%- generation %}{{- message['content'] + eos_token }}{%- endgeneration %}"
    "{%- else %}"
    "{{- message['content'] + eos_token }}"
    "{%- endif %}"
    "{%- endfor %}"
)

NAMED_TEMPLATES: dict[str, str] = {
    "chatml": _CHATML,
    "llama3": _LLAMA3,
    "zephyr": _ZEPHYR,
    "plain_roles": _PLAIN_ROLES,
    "eos_separated": _EOS_SEPARATED,
}


def strip_generation_markers(template: str) -> str:
    """``template`` without its `{% generation %}` / `{% endgeneration %}` tags (it renders the same text)."""
    return GENERATION_MARKER.sub("", template)


def has_generation_markers(template: str) -> bool:
    """Whether ``template`` marks assistant content with `{% generation %}` blocks."""
    return GENERATION_MARKER.search(template) is not None


NAMED_TEMPLATES_PLAIN: dict[str, str] = {name: strip_generation_markers(text) for name, text in NAMED_TEMPLATES.items()}

TEMPLATE_SPECIAL_TOKENS: dict[str, tuple[str, ...]] = {
    "chatml": ("<|im_start|>", "<|im_end|>"),
    "llama3": ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
    # plain text and the tokenizer's own eos: nothing to add
    "zephyr": (),
    "plain_roles": (),
    "eos_separated": (),
}

# The token that closes an assistant turn: generation must stop on it (set it as the eos for sampling).
END_OF_TURN_TOKENS: dict[str, str] = {"chatml": "<|im_end|>", "llama3": "<|eot_id|>"}
