"""Fields TRL's config classes had in earlier releases and dropped by the installed one: a config written for TRL 0.x
(Oumi pins trl>=0.24; most published DPO configs set ``max_prompt_length``) is read as that release read it, not
refused as a misspelling. Each field: honoured (honing's key), a note (it changes no step here), or refused (why).
The rows come from the classes of TRL 0.24.0 and 0.12.2 compared with the installed one
(``tests/interop/configs/test_trl_former_fields.py`` checks that each is gone from the installed class)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from honing.interop.configs.translation import Translation, read_number

FORMER = "an earlier TRL's field (0.x)"
PADDING = "not needed: padding is masked by position, whatever its value"
LIGER = "not needed: honing's chunked loss (model.chunked_loss) never holds the full logits either (the same numbers)"
ENCODER_DECODER = "not needed: used by encoder-decoder models only; honing trains decoder-only models"
# TRL 0.x's KTO, ORPO and CPO cut the prompt to max_prompt_length only when prompt + reply passed max_length
CONDITIONAL_PROMPT = (
    "honing cuts an overlong row's prompt from the left only as far as data.seq_len (max_length) needs; TRL 0.x cut "
    "it to this length whenever the row was too long (set data.max_prompt_length for a cap on every prompt)"
)

Reader = Callable[[Translation, str, Any], None]


def cap(path: str, what: str) -> Reader:
    """A length read as honing's ``path`` (a positive integer; null: no cap)."""

    def read(t: Translation, key: str, value: Any) -> None:
        if value is None:
            t.note(key, f"{FORMER}: null, no cap")
            return
        number = read_number(t, key, value, int)
        if number is not None and number < 1:
            t.refuse(key, f"{value!r}: expected a positive number of tokens")
        elif number is not None:
            t.set(path, number)
            t.note(key, f"{FORMER}, read as {path}: {what}")

    return read


def note(why: str) -> Reader:
    """A field that changes no step: one note whatever its value."""
    return lambda t, key, value: t.note(key, f"{FORMER}: {why}")


def only(allowed: tuple[Any, ...], why_not: str, why: str = "not needed here") -> Reader:
    """A field honing reads at ``allowed`` (null too: a note) and refuses otherwise, saying ``why_not``."""

    def read(t: Translation, key: str, value: Any) -> None:
        if value is None or value in allowed:
            t.note(key, f"{FORMER}: {value!r}, {why}")
        else:
            t.refuse(key, f"{FORMER}: {value!r} is not available: {why_not}")

    return read


def copy(path: str, kind: type) -> Reader:
    """A field honing has under another name."""

    def read(t: Translation, key: str, value: Any) -> None:
        if value is None:
            return
        number = read_number(t, key, value, kind)
        if number is not None:
            t.set(path, number)
            t.note(key, f"{FORMER}, read as {path}")

    return read


def grpo_prompt_length(t: Translation, key: str, value: Any) -> None:
    """GRPO's ``max_prompt_length``: rows of prompt + completion, as Oumi's ``training.grpo.max_prompt_length``."""
    if value is None:
        t.note(key, f"{FORMER}: null, no cap")
        return
    number = read_number(t, key, value, int)
    if number is not None:
        section = "rloo" if t.get("method") == "rloo" else "grpo"
        completion = int(t.get(f"{section}.max_completion_length") or 256)
        t.set("data.seq_len", number + completion)
        t.note(
            key,
            f"{FORMER}: data.seq_len = {number} + {section}.max_completion_length; honing leaves out a prompt that "
            "leaves fewer tokens than max_completion_length (TRL 0.x cut it from the left to this length)",
        )


DPO_CAPS: dict[str, Reader] = {
    "max_prompt_length": cap("data.max_prompt_length", "a prompt keeps its last tokens, as TRL 0.x's DPO cut it"),
    "max_completion_length": cap("data.max_completion_length", "each reply keeps its first tokens, as TRL 0.x's"),
}
NO_REFERENCE_INIT = only(({},), "honing loads the reference as it loads the model (dpo.reference)")
COMMON_PREFERENCE: dict[str, Reader] = {
    "label_pad_token_id": note(PADDING),
    "padding_value": note(PADDING),
    "use_liger_loss": note(LIGER),
    "base_model_attribute_name": note("not needed: honing finds the model's body itself"),
    "is_encoder_decoder": only((False,), "honing trains decoder-only models"),
    "generate_during_eval": only(
        (False,), "honing's callbacks.sample shows the policy's completions during training (no reference samples)"
    ),
}
FORMER_FIELDS: dict[str, dict[str, Reader]] = {
    "SFTConfig": {
        "max_seq_length": copy("data.seq_len", int),  # renamed max_length in TRL 0.20
        "dataset_batch_size": note("not needed: honing tokenizes rows in its own batches (the same rows)"),
        "num_of_sequences": note("not needed: honing packs rows itself (data.packing)"),
        "chars_per_token": note("not needed: honing packs rows itself (data.packing)"),
        "use_liger": note(LIGER),
    },
    "DPOConfig": {
        **COMMON_PREFERENCE,
        **DPO_CAPS,
        "rpo_alpha": copy("dpo.rpo_alpha", float),
        "reference_free": only(
            (False,),
            "DPO against no reference; CPO's sigmoid loss with cpo.cpo_alpha 0 (method: cpo) is that loss",
        ),
        "force_use_ref_model": note("not needed: honing's reference is dpo.reference's (a frozen copy by default)"),
        "use_logits_to_keep": note("not needed: honing computes the loss on the replies' positions only"),
        "ref_model_init_kwargs": NO_REFERENCE_INIT,
        "model_adapter_name": only((), "honing trains one adapter (model.lora)"),
        "ref_adapter_name": only((), "honing's reference is dpo.reference's (adapters_off: the base)"),
        "tools": only(([],), "honing's DPO renders no tool schemas into prompts"),
        "max_target_length": note(ENCODER_DECODER),
    },
    "KTOConfig": {
        **COMMON_PREFERENCE,
        "max_prompt_length": note(CONDITIONAL_PROMPT),
        "max_completion_length": note(ENCODER_DECODER),
        "truncation_mode": only(("keep_end",), "honing keeps a prompt's end", "the prompt's end is kept, as here"),
        "ref_model_init_kwargs": NO_REFERENCE_INIT,
    },
    "ORPOConfig": {
        "label_pad_token_id": note(PADDING),
        "max_prompt_length": note(CONDITIONAL_PROMPT),
        "truncation_mode": only(("keep_end",), "honing keeps a prompt's end", "the prompt's end is kept, as here"),
    },
    "GRPOConfig": {
        "max_prompt_length": grpo_prompt_length,
        "use_liger_loss": note(LIGER),
        "vllm_guided_decoding_regex": only((), "honing's decoder samples without structured outputs"),
        "wandb_log_unique_prompts": note("not needed: honing logs completions with callbacks.sample"),
    },
}
FORMER_FIELDS["CPOConfig"] = {**FORMER_FIELDS["ORPOConfig"], "padding_value": note(PADDING)}


def read_former_field(t: Translation, config_class: str, key: str, value: Any) -> bool:
    """Read ``key`` as the earlier TRL's ``config_class`` did; False when no earlier release had it."""
    reader = FORMER_FIELDS.get(config_class, {}).get(key)
    if reader is None:
        return False
    reader(t, key, value)
    return True
