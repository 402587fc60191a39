"""``method`` selects a variant of the run config: which keys each training method reads, and which it refuses.

There is one ``RunConfig`` with every section, and this table says, for each method, which keys it never reads
(``unused``: a key, or a whole section with everything under it) and which values of a key it cannot handle
(``values``: key → the values it reads). Validation refuses every key the user *set* (pydantic's
``model_fields_set``, recursively, so a default never counts) that the chosen method does not use, one line per
key, naming the key path and the method::

    callbacks.generation_eval: not used by method 'pretrain' (used by: sft)
    data.train.sources[0].format: 'alpaca' not used by method 'pretrain'; expected one of: auto, text, jsonl

A table rather than a pydantic discriminated union of one model per method: almost every key is shared, and the
differences sit deep inside shared sections (``data.chat_template``, a source's ``format``), so a union would need
a copy of ``data``, its splits, its sources and ``callbacks`` per method, and a key missing from a variant would be
reported as "unknown key" rather than as "not used by this method". The table keeps one schema for
``honing config schema`` (the table itself is in it under ``x-honing-methods``) and the messages exact.

Adding a method (``vl_sft``, ``dpo``, ``grpo`` are next) is declarative:

1. its own section in ``schema.py``, if it has one: ``class DPOSection(Section)`` and, on ``RunConfig``,
   ``dpo: Optional[DPOSection] = None``;
2. one line in ``METHODS`` below, e.g.
   ``"dpo": Method(section="dpo", unused=FINETUNE_ONLY, values=source_formats("auto", "preference")),`` or
   ``"vl_sft": replace(METHODS["sft"], section="vl_sft"),`` after the ``sft`` line.

A method's own section is refused for every other method. ``tests/config/test_schema_walk.py`` then builds the
method's recipe with every feature on and proves that each key is read by it or refused here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

if TYPE_CHECKING:
    from honing.config.schema import RunConfig

SOURCE_FORMAT_KEYS = ("data.train.sources[].format", "data.validation.sources[].format")


def source_formats(*formats: str) -> dict[str, tuple[str, ...]]:
    """``values`` entries allowing only ``formats`` for the sources of both splits."""
    return {key: formats for key in SOURCE_FORMAT_KEYS}


@dataclass(frozen=True)
class Method:
    """What one training method reads from the run config."""

    unused: tuple[str, ...] = ()
    """Key paths it never reads; a section path covers every key under it."""
    values: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    """Key path → the only values it reads."""
    section: str | None = None
    """Its own top-level section, refused for every other method; None: it has none."""
    disable_dropout: bool = False
    """``model.disable_dropout``'s default for it: TRL's config's (true for DPO, KTO, ORPO, CPO, reward and GKD)."""


# Keys only fine-tuning reads: chat rendering and label masking, packing or padding of whole examples, what to
# do with examples too long or malformed, and answers to held-out conversations. Pretraining concatenates
# documents and cuts rows, so none of them applies.
FINETUNE_ONLY = (
    "data.chat_template",
    "data.chat_template_fallback",
    "data.train_on",
    "data.packing",
    "data.group_by_length",
    "data.overlong",
    "data.bad_rows",
    "data.cache_rows",
    "callbacks.generation_eval",
)

# olmOCR's pipeline options: the run's, and a source's own
PDF_PAGES = ("data.pdf_pages", "data.train.sources[].pdf_pages", "data.validation.sources[].pdf_pages")

# Keys only vision-language SFT reads: images, the vision tower and its learning rate.
VISION_ONLY = (
    "data.min_pixels",
    "data.max_pixels",
    "data.pdf_longest_side",
    *PDF_PAGES,
    "data.image_transforms",
    "model.freeze_vision",
    "model.freeze_projector",
    "model.freeze_language",
    "optim.vision_lr",
)

# The text tokenizer's template fallback: image methods render with the processor's own template
TEXT_TEMPLATE_ONLY = ("data.chat_template_fallback",)

# Keys only the prompt methods (grpo and those built on its rollouts) read: the chat template's extra variables,
# given at each rendering of a prompt or a tool turn (TRL's GRPOConfig / RLOOConfig chat_template_kwargs).
PROMPT_ONLY = ("data.chat_template_kwargs",)

# Keys only pretraining reads: rows cut from one stream of documents.
PRETRAIN_ONLY = ("data.document_masking", "data.text_document_separator")

# Keys only the text preference methods read (dpo, orpo, cpo, kto): a pair's prompt and replies capped apart
PAIR_LENGTHS = ("data.max_prompt_length", "data.max_completion_length")

# Named data sets build prompts and conversations from a data set's own columns; pretraining reads documents.
NAMED_DATASET_KEYS = ("data.train.sources[].dataset", "data.validation.sources[].dataset")

# Names label validation sources' own metrics (eval/<name>/*), which the methods with a validation loss over
# fine-tuning rows report: a training source has none, and pretraining's and GRPO's validation is not per source.
TRAIN_SOURCE_NAME = ("data.train.sources[].name",)
VALIDATION_SOURCE_NAME = ("data.validation.sources[].name",)
NOT_USED_WHY = {"data.train.sources[].name": "a name labels a validation source's metrics, eval/<name>/*"}

# Keys only the next-token methods (pretrain, sft, vl_sft) read: DPO's and GRPO's losses add no router loss.
NEXT_TOKEN_ONLY = ("model.router_aux_loss_coef",)

# Preference pairs: labels are the completions (no train_on), pairs are padded side by side (no packing); the
# pair methods (dpo, orpo, cpo) read the same keys besides their own section.
PREFERENCE_PAIRS = Method(
    unused=(
        "tokenizer.vocab_size",
        "data.train_on",
        "data.packing",
        *PROMPT_ONLY,
        *VISION_ONLY,
        *PRETRAIN_ONLY,
        *NEXT_TOKEN_ONLY,
        *TRAIN_SOURCE_NAME,
    ),
    values={
        **source_formats("auto", "preference", "preference_prompt", "preference_sharegpt", "preference_transcript"),
        "tokenizer.kind": ("auto", "byte", "pretrained"),
    },
    disable_dropout=True,  # TRL's DPOConfig, KTOConfig, ORPOConfig, CPOConfig and RewardConfig
)

METHODS: dict[str, Method] = {
    "pretrain": Method(
        unused=FINETUNE_ONLY
        + PAIR_LENGTHS
        + PROMPT_ONLY
        + VISION_ONLY
        + TRAIN_SOURCE_NAME
        + VALIDATION_SOURCE_NAME
        + NAMED_DATASET_KEYS,
        values=source_formats("auto", "text", "jsonl", "tokens"),
    ),
    # the tokenizer comes from the model or is byte-level: nothing is trained on the rows, so no vocab_size
    "sft": Method(
        section="sft",
        unused=("tokenizer.vocab_size", *PROMPT_ONLY, *VISION_ONLY, *PRETRAIN_ONLY, *TRAIN_SOURCE_NAME, *PAIR_LENGTHS),
        values={
            **source_formats("auto", "text", "conversation", "alpaca", "sharegpt", "prompt_completion"),
            "tokenizer.kind": ("auto", "byte", "pretrained"),
        },
    ),
    # prompts in, completions generated: no labels to mask, nothing packed, no validation loss (held-out prompts
    # are sampled and scored by the rewards at each evaluation, and answered by the generation eval)
    "grpo": Method(
        section="grpo",
        unused=(
            *VISION_ONLY,
            *PRETRAIN_ONLY,
            *NEXT_TOKEN_ONLY,
            *TRAIN_SOURCE_NAME,
            *PAIR_LENGTHS,
            "tokenizer.vocab_size",
            "data.train_on",
            "data.packing",
            "data.group_by_length",
            "data.overlong",
            "data.bad_rows",
            "data.validation_split",  # validation prompts come from data.validation
        ),
        values={
            **source_formats("auto", "prompt", "conversation"),
            "tokenizer.kind": ("auto", "byte", "pretrained"),
        },
    ),
    # preference pairs: DPO against a reference, ORPO and CPO / SimPO without one
    "dpo": replace(PREFERENCE_PAIRS, section="dpo"),
    "orpo": replace(PREFERENCE_PAIRS, section="orpo"),
    "cpo": replace(PREFERENCE_PAIRS, section="cpo"),
    # unpaired rows (TRL's prompt / completion / label: prompt_completion) or pairs turned into two rows
    "kto": replace(
        PREFERENCE_PAIRS,
        section="kto",
        values={
            **PREFERENCE_PAIRS.values,
            **source_formats(*PREFERENCE_PAIRS.values[SOURCE_FORMAT_KEYS[0]], "prompt_completion"),
        },
    ),
    # a score head on the model's body, trained on DPO's pairs: it generates nothing and cannot hold a QLoRA base
    "reward": replace(
        PREFERENCE_PAIRS,
        section="reward",
        unused=(
            *PREFERENCE_PAIRS.unused,
            *PAIR_LENGTHS,  # TRL's RewardConfig has max_length only
            "callbacks.generation_eval",
            "callbacks.sample",
            "callbacks.harness_eval",
            "model.quantize",
        ),
        values={**PREFERENCE_PAIRS.values, "model.lora.task_type": ("SEQ_CLS",)},
    ),
    # image conversations through the model's own processor (its tokenizer, chat template and image processor):
    # nothing is trained on the rows, and a named text template cannot place images; lm-eval's text backend
    # (HFLM) does not load image-text-to-text models, so no harness evaluation during training
    "vl_sft": Method(
        unused=(
            "tokenizer.vocab_size",
            *PROMPT_ONLY,
            *PRETRAIN_ONLY,
            *TRAIN_SOURCE_NAME,
            *PAIR_LENGTHS,
            *TEXT_TEMPLATE_ONLY,
            "callbacks.harness_eval",
        ),
        values={
            **source_formats("auto", "conversation", "mllm", "olmocr_pages", "olmocr_batch"),
            "tokenizer.kind": ("auto", "pretrained"),
        },
    ),
}
METHODS["rloo"] = replace(METHODS["grpo"], section="rloo")  # GRPO's rollouts with RLOO's estimator
# GRPO's rollouts, one completion a prompt, with a value model; TRL's PPOTrainer turns dropout off in every model
METHODS["ppo"] = replace(METHODS["grpo"], section="ppo", disable_dropout=True)
METHODS["online_dpo"] = replace(METHODS["grpo"], section="online_dpo", disable_dropout=True)  # TRL's OnlineDPOConfig
#: GRPO's multi-turn tool-use keys (``grpo.tools`` and what only tool calls read)
GRPO_TOOL_KEYS = tuple(
    f"grpo.{key}" for key in ("tools", "max_turns", "tool_timeout", "max_tool_response_length", "tool_call_format")
)
# GRPO's section on image prompts through the model's processor (VL-SFT's model keys; no PDF pages)
METHODS["vl_grpo"] = replace(
    METHODS["grpo"],
    unused=(
        *(k for k in METHODS["grpo"].unused if k not in VISION_ONLY),
        *PDF_PAGES,
        *TEXT_TEMPLATE_ONLY,
        "data.image_transforms",  # VL-SFT's images only
        "callbacks.harness_eval",
        *GRPO_TOOL_KEYS,  # tool turns carry no pixel inputs
    ),
    values={**source_formats("auto", "prompt", "conversation", "mllm"), "tokenizer.kind": ("auto", "pretrained")},
)
# DPO's section on pairs whose prompts hold images, through the model's processor (VL-SFT's model keys; no PDF pages)
METHODS["vl_dpo"] = replace(
    METHODS["dpo"],
    unused=(
        *(k for k in METHODS["dpo"].unused if k not in VISION_ONLY),
        *PAIR_LENGTHS,  # an image prompt is never cut (its image tokens)
        *PDF_PAGES,
        *TEXT_TEMPLATE_ONLY,
        "data.image_transforms",
        "callbacks.harness_eval",
    ),
    values={**source_formats("auto", "preference", "preference_prompt"), "tokenizer.kind": ("auto", "pretrained")},
)
# SFT's conversations, padded (a row's prompt is sampled from), scored by a teacher: no router loss is added
METHODS["distill"] = replace(
    METHODS["sft"],
    section="distill",
    unused=(*METHODS["sft"].unused, *NEXT_TOKEN_ONLY, "data.packing"),
    disable_dropout=True,  # TRL's GKDConfig
)


def dropout_disabled(config: RunConfig) -> bool:
    """``model.disable_dropout`` as the run applies it: the key where given, else the method's TRL default."""
    value = config.model.disable_dropout
    return METHODS[config.method].disable_dropout if value is None else value


def unused_keys(method: str) -> set[str]:
    """The key paths ``method`` never reads: its table entry plus every other method's own section."""
    spec = METHODS[method]
    others = {other.section for name, other in METHODS.items() if name != method and other.section} - {spec.section}
    return set(spec.unused) | others


def refused_key(method: str, path: str) -> str | None:
    """The refused key path that covers ``path`` (itself or a section above it) for ``method``, or None."""
    for key in unused_keys(method):
        if path == key or path.startswith(key + ".") or path.startswith(key + "[]"):
            return key
    return None


def users_of(path: str) -> list[str]:
    """The methods that do not refuse ``path``."""
    return [name for name in METHODS if refused_key(name, path) is None]


def refusals(config: BaseModel, method: str) -> list[str]:
    """One line per key set in ``config`` that ``method`` does not use, or set to a value it does not read."""
    unused, values = unused_keys(method), METHODS[method].values
    lines: list[str] = []

    def walk(model: BaseModel, shown: str, key: str) -> None:
        for name in type(model).model_fields:
            if name not in model.model_fields_set:
                continue
            # read through __dict__: refusals run inside validation, never as a use of the key
            value = model.__dict__[name]
            child_shown, child_key = f"{shown}.{name}" if shown else name, f"{key}.{name}" if key else name
            if child_key in unused:
                users = ", ".join(users_of(child_key))
                why = f"used by: {users}" if users else NOT_USED_WHY.get(child_key, "used by no method")
                lines.append(f"{child_shown}: not used by method {method!r} ({why})")
            elif child_key in values and value not in values[child_key]:
                allowed = ", ".join(str(v) for v in values[child_key])
                lines.append(f"{child_shown}: {value!r} not used by method {method!r}; expected one of: {allowed}")
            elif isinstance(value, BaseModel):
                walk(value, child_shown, child_key)
            elif isinstance(value, list):
                for index, item in enumerate(value):
                    if isinstance(item, BaseModel):
                        walk(item, f"{child_shown}[{index}]", f"{child_key}[]")

    walk(config, "", "")
    return lines


def methods_json() -> dict[str, Any]:
    """The table as JSON, for ``honing config schema``."""
    return {
        name: {
            "unused": sorted(unused_keys(name)),
            "values": {k: list(v) for k, v in spec.values.items()},
            "section": spec.section,
            "disable_dropout": spec.disable_dropout,
        }
        for name, spec in METHODS.items()
    }
