"""``data.chat_template_kwargs`` reach the chat template at each rendering of a prompt method's run (TRL's
``chat_template_kwargs``, e.g. Qwen3's ``enable_thinking``), change the prepared rows' cache key only when set, and
are refused for the methods that render no prompts."""

from __future__ import annotations

import pytest

from honing.config import validate
from honing.config.data_schema import DataSection
from honing.data.prompts.prompt_rows import PromptRows
from honing.data.prompts.prompts import Prompt
from honing.data.tokenizer import build_tokenizer
from honing.errors import ConfigError

# Qwen3's switch, reduced: the generation prompt closes an empty think block when thinking is off
TEMPLATE = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>"
    "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}{% endif %}"
)


def rendered(tmp_path, **template_kwargs) -> tuple[str, dict]:
    tokenizer = build_tokenizer("byte")
    tokenizer.chat_template = TEMPLATE
    rows = PromptRows(
        tokenizer,
        TEMPLATE,
        DataSection.model_validate(
            {"train": {"sources": [{"path": "unused.jsonl"}]}, "chat_template_kwargs": template_kwargs}
        ),
        max_completion_length=8,
        num_generations=2,
        cache_dir=str(tmp_path),
    )
    ids = rows.prompt_ids(Prompt([{"role": "user", "content": "2+2?"}], {}))
    return tokenizer.decode(ids), rows.settings()


def test_the_templates_variable_is_given_at_the_prompts_rendering(tmp_path):
    off, off_settings = rendered(tmp_path, enable_thinking=False)
    plain, plain_settings = rendered(tmp_path)
    assert off == "<user>2+2?<assistant><think></think>"
    assert plain == "<user>2+2?<assistant>"
    assert "chat_template_kwargs" not in plain_settings  # earlier runs' prepared rows keep their key
    assert off_settings["chat_template_kwargs"] == '{"enable_thinking": false}'


def test_a_method_that_renders_no_prompts_refuses_the_key():
    run = {
        "method": "sft",
        "model": {"config": {"model_type": "llama"}},
        "data": {"train": {"sources": [{"path": "chat.jsonl"}]}, "chat_template_kwargs": {"enable_thinking": False}},
    }
    with pytest.raises(ConfigError, match=r"data.chat_template_kwargs: not used by method 'sft' \(used by: grpo"):
        validate(run)
    run["method"] = "grpo"
    assert validate(run).data.chat_template_kwargs == {"enable_thinking": False}
