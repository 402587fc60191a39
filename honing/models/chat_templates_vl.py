"""Chat templates of the vision-language families, rewritten with `{% generation %}` markers for assistant-only loss.

Each renders the same text as the family's released template for a conversation of user / assistant (/ system)
messages with text and image items; the `{% generation %}` blocks mark the assistant's tokens for
``return_assistant_tokens_mask``. The released templates ship with the hub checkpoints (Apache-2.0), not with
transformers, so the tiny processors need these copies. Video items are left out: honing trains on images.
Every literal is written as a `{{ '...' }}` expression so that whitespace control (`{%-`) never eats a newline.
"""

from __future__ import annotations

# One content list (a string, or items of type text / image) of a Qwen-VL message. `counts` carries the image number
# across messages, as the released template's namespace does, for its optional "Picture N: " prefixes.
_QWEN_CONTENT_MACRO = (
    "{%- macro qwen_content(content, counts) -%}"
    "{%- if content is string -%}{{- content -}}"
    "{%- else -%}{%- for item in content -%}"
    "{%- if item['type'] == 'image' or 'image' in item or 'image_url' in item -%}"
    "{%- set counts.images = counts.images + 1 -%}"
    "{%- if add_vision_id -%}{{- 'Picture ' ~ counts.images ~ ': ' -}}{%- endif -%}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif 'text' in item -%}{{- item['text'] -}}"
    "{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- endmacro -%}"
)


def _qwen_template(default_system: str | None) -> str:
    """The Qwen2-VL template (Qwen2.5-VL's is the same); Qwen3-VL's has no default system message."""
    system = (
        "{%- if loop.first and message['role'] != 'system' -%}"
        f"{{{{- '<|im_start|>system\\n{default_system}<|im_end|>\\n' -}}}}"
        "{%- endif -%}"
        if default_system
        else ""
    )
    return (
        _QWEN_CONTENT_MACRO + "{%- set counts = namespace(images=0) -%}"
        "{%- for message in messages -%}" + system + "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
        "{%- if message['role'] == 'assistant' -%}"
        # The newline after <|im_end|> only separates turns (generation stops at <|im_end|>): outside the block.
        "{%- generation -%}{{- qwen_content(message['content'], counts) + '<|im_end|>' -}}{%- endgeneration -%}"
        "{{- '\\n' -}}"
        "{%- else -%}{{- qwen_content(message['content'], counts) + '<|im_end|>\\n' -}}"
        "{%- endif -%}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
    )


QWEN2_VL_TEMPLATE = _qwen_template("You are a helpful assistant.")
QWEN3_VL_TEMPLATE = _qwen_template(None)

# Molmo2 writes every image first (one `<|image|>`, or "Image N<|image|>" for several), then the turns; a message's
# text items are joined with spaces. The released template leaves the last assistant turn open (the next user turn
# closes it); here every assistant turn ends with <|im_end|> inside its generation block, so the model learns to stop.
# The text starts with the bos token, which Molmo2's processor would otherwise prepend after rendering: that shifts
# every character offset and puts the assistant mask of `return_assistant_tokens_mask` on the wrong tokens.
MOLMO2_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- set counts = namespace(images=0) -%}"
    "{%- for message in messages -%}{%- if message['content'] is not string -%}"
    "{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' or 'image' in item or 'image_url' in item -%}"
    "{%- set counts.images = counts.images + 1 -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if counts.images == 1 -%}{{- '<|image|>' -}}"
    "{%- elif counts.images > 1 -%}"
    "{%- for i in range(counts.images) -%}{{- 'Image ' ~ (i + 1) ~ '<|image|>' -}}{%- endfor -%}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- set parts = namespace(text='') -%}"
    "{%- if message['content'] is string -%}{%- set parts.text = message['content'] -%}"
    "{%- else -%}"
    "{%- for item in message['content'] -%}{%- if item['type'] == 'text' -%}"
    "{%- set parts.text = parts.text ~ ('' if not parts.text else ' ') ~ item['text'] -%}"
    "{%- endif -%}{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['role'] == 'assistant' -%}"
    "{%- generation -%}{{- parts.text + '<|im_end|>' -}}{%- endgeneration -%}{{- '\\n' -}}"
    "{%- else -%}{{- parts.text + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

# llava-1.5 (llava-hf): "USER: <image>\n... ASSISTANT: ...</s>", a message's images before its text.
LLAVA_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] != 'system' -%}{{- message['role'].upper() + ': ' -}}{%- endif -%}"
    "{%- if message['content'] is string -%}"
    "{%- set items = [{'type': 'text', 'text': message['content']}] -%}"
    "{%- else -%}{%- set items = message['content'] -%}{%- endif -%}"
    "{%- for item in items | selectattr('type', 'equalto', 'image') -%}{{- '<image>\\n' -}}{%- endfor -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{%- generation -%}"
    "{%- for item in items | selectattr('type', 'equalto', 'text') -%}{{- item['text'] -}}{%- endfor -%}"
    "{{- '</s>' -}}"
    "{%- endgeneration -%}"
    "{%- else -%}"
    "{%- for item in items | selectattr('type', 'equalto', 'text') -%}{{- item['text'] + ' ' -}}{%- endfor -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- 'ASSISTANT:' -}}{%- endif -%}"
)

# Idefics3 (SmolVLM's is the same):
# "<|im_start|>User:<image>text<end_of_utterance>\nAssistant: answer<end_of_utterance>\n"; a message that starts with
# an image has no space after its colon.
IDEFICS3_TEMPLATE = (
    "{{- '<|im_start|>' -}}"
    "{%- for message in messages -%}"
    "{{- message['role'] | capitalize -}}"
    "{%- if message['content'] is string -%}"
    "{%- set items = [{'type': 'text', 'text': message['content']}] -%}"
    "{%- else -%}{%- set items = message['content'] -%}{%- endif -%}"
    "{%- if items[0]['type'] == 'image' -%}{{- ':' -}}{%- else -%}{{- ': ' -}}{%- endif -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{%- generation -%}"
    "{%- for item in items -%}{%- if item['type'] == 'text' -%}{{- item['text'] -}}{%- endif -%}{%- endfor -%}"
    "{{- '<end_of_utterance>' -}}"
    "{%- endgeneration -%}{{- '\\n' -}}"
    "{%- else -%}"
    "{%- for item in items -%}"
    "{%- if item['type'] == 'text' -%}{{- item['text'] -}}"
    "{%- elif item['type'] == 'image' -%}{{- '<image>' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{{- '<end_of_utterance>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- 'Assistant:' -}}{%- endif -%}"
)
