"""TRL keys read beside each class's own reader (``trl_method_keys``): ``chat_template_path`` (SFT, GKD, reward) as
``data.chat_template``, and GRPOConfig's / RLOOConfig's ``reward_weights``, ``num_generations_eval`` and
``generation_kwargs`` as the ``grpo`` / ``rloo`` section's keys, ``chat_template_kwargs`` as the data section's."""

from __future__ import annotations

import json
from pathlib import Path

from honing.interop.configs.key_tables import key_table
from honing.interop.configs.schema_table import schema_default
from honing.interop.configs.translation import Keys, Translation

KEYS = key_table("trl").keys

# generation_kwargs' keys (transformers' GenerationConfig / vLLM's SamplingParams names) -> the section's own key
GENERATION_KEYS = {"temperature": float, "top_p": float, "top_k": int}
# the sampling filters beside GENERATION_KEYS, and their values that mean off
FILTER_KEYS = {"min_p": None, "repetition_penalty": 1.0}
LENGTH_KEYS = ("max_new_tokens", "max_tokens")  # GenerationConfig's / SamplingParams' name of the same length
JINJA_SUFFIXES = (".jinja", ".j2")


def read_chat_template_path(t: Translation, top: Keys) -> None:
    """A ``.jinja`` / ``.j2`` file (TRL reads it as the tokenizer's template) as ``data.chat_template``, its text;
    a tokenizer to clone the template of (TRL's other form) is refused in one line."""
    path = top.take("chat_template_path")
    if path is None:
        return
    file = Path(str(path))
    if not str(path).endswith(JINJA_SUFFIXES):
        t.refuse("chat_template_path", f"{path!r}: give a .jinja / .j2 file (a tokenizer's template is not cloned)")
    elif not file.is_file():
        t.refuse("chat_template_path", f"{path!r}: no such file (read from the working directory, as TRL reads it)")
    else:
        t.set("data.chat_template", file.read_text(encoding="utf-8"))


def read_online_extras(t: Translation, top: Keys, config_class: str, section: str) -> None:
    """``reward_weights`` (one per reward), ``generation_kwargs`` (each sampling key the section has; another
    refused by name) and ``num_generations_eval`` (the held-out prompts sampled as the training ones: TRL's eval)."""
    weights = top.take("reward_weights")
    if weights is not None:
        if isinstance(weights, list) and all(isinstance(w, (int, float)) and not isinstance(w, bool) for w in weights):
            t.set(f"{section}.reward_weights", [float(w) for w in weights])
        else:
            t.refuse("reward_weights", f"{weights!r}: expected a list of numbers, one per reward")
    read_generation_kwargs(t, t.section(top.take("generation_kwargs"), "generation_kwargs"), section)
    read_chat_template_kwargs(t, top.take("chat_template_kwargs"))
    evaluated = top.number("num_generations_eval", int)
    if evaluated is not None:  # TRL samples the eval prompts with the training's temperature, top_p and top_k
        t.set(f"{section}.validation.num_generations", evaluated)
        for name, kind in GENERATION_KEYS.items():
            value = t.get(f"{section}.{name}")
            default = schema_default(KEYS[config_class][name][1])
            t.set(f"{section}.validation.{name}", kind(default if value is None else value))
        for name, off in FILTER_KEYS.items():  # set only where on: the validation section's default is off
            value = t.get(f"{section}.{name}")
            if value not in (None, off):
                t.set(f"{section}.validation.{name}", value)


def read_chat_template_kwargs(t: Translation, value: object) -> None:
    """``chat_template_kwargs`` (a mapping, or TRL's command-line form: a JSON string of one) as
    ``data.chat_template_kwargs``."""
    if value is None:
        return
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            pass
    if not isinstance(value, dict):
        t.refuse(
            "chat_template_kwargs",
            f"{value!r}: expected a mapping of template variables, e.g. {{enable_thinking: false}}",
        )
        return
    t.set("data.chat_template_kwargs", value)


def read_generation_kwargs(t: Translation, kwargs: Keys, section: str) -> None:
    """``generation_kwargs``: they override the class's own sampling keys, as in TRL."""
    for name, kind in GENERATION_KEYS.items():
        kwargs.copy(name, f"{section}.{name}", kind)
    for name in FILTER_KEYS:
        kwargs.copy(name, f"{section}.{name}", float)
    for name in LENGTH_KEYS:
        kwargs.copy(name, f"{section}.max_completion_length", int)
    if kwargs.take("do_sample") is False:
        t.refuse(kwargs.key("do_sample"), "false is not available: completions are sampled (give a low temperature)")
    kwargs.done(
        f"honing samples with {section}.temperature, top_p, top_k, min_p, repetition_penalty and max_completion_length"
    )
