"""Fields TRL's config classes had in earlier releases and dropped by the installed one: a config written for TRL 0.x
(Oumi pins trl>=0.24; a TRL 0.x DPO config sets ``max_prompt_length``, say) is read as that release read it, not
refused as a misspelling. Each field: honoured (honing's key), a note (it changes no step here), or refused (why).
The rows come from the classes of TRL 0.24.0 and 0.12.2 and transformers 4.57.1's ``TrainingArguments`` compared with
the installed ones (``tests/interop/configs/test_trl_former_fields.py`` checks that each is gone from them)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from honing.interop.configs.hf_args import set_warmup
from honing.interop.configs.translation import Translation, read_number

FORMER = "an earlier TRL's field (0.x)"
TRANSFORMERS_4 = "transformers 4's field (dropped in 5)"
PADDING = "not needed: padding is masked by position, whatever its value"
LIGER = "not needed: honing's chunked loss (model.chunked_loss) never holds the full logits either (the same numbers)"
ENCODER_DECODER = "not needed: used by encoder-decoder models only; honing trains decoder-only models"
# TRL 0.x's KTO, ORPO and CPO cut the prompt to max_prompt_length only when prompt + reply passed max_length
CONDITIONAL_PROMPT = (
    "honing cuts an overlong row's prompt from the left only as far as data.seq_len (max_length) needs; TRL 0.x cut "
    "it to this length whenever the row was too long (set data.max_prompt_length for a cap on every prompt)"
)

# a reader: (translation, key, value, the file's other values)
Reader = Callable[[Translation, str, Any, Mapping[str, Any]], None]


def cap(path: str, what: str) -> Reader:
    """A length read as honing's ``path`` (a positive integer; null: no cap)."""

    def read(t: Translation, key: str, value: Any, values: Mapping[str, Any]) -> None:
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


def note(why: str, whose: str = FORMER) -> Reader:
    """A field that changes no step: one note whatever its value."""
    return lambda t, key, value, values: t.note(key, f"{whose}: {why}")


def only(allowed: tuple[Any, ...], why_not: str, why: str = "not needed here", whose: str = FORMER) -> Reader:
    """A field honing reads at ``allowed`` (null too: a note) and refuses otherwise, saying ``why_not``."""

    def read(t: Translation, key: str, value: Any, values: Mapping[str, Any]) -> None:
        if value is None or value in allowed:
            t.note(key, f"{whose}: {value!r}, {why}")
        else:
            t.refuse(key, f"{whose}: {value!r} is not available: {why_not}")

    return read


def copy(path: str, kind: type) -> Reader:
    """A field honing has under another name."""

    def read(t: Translation, key: str, value: Any, values: Mapping[str, Any]) -> None:
        if value is None:
            return
        number = read_number(t, key, value, kind)
        if number is not None:
            t.set(path, number)
            t.note(key, f"{FORMER}, read as {path}")

    return read


def grpo_prompt_length(t: Translation, key: str, value: Any, values: Mapping[str, Any]) -> None:
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


def note4(why: str) -> Reader:
    """``note`` for a field of transformers 4's ``TrainingArguments``."""
    return note(why, TRANSFORMERS_4)


def only4(allowed: tuple[Any, ...], why_not: str, why: str = "not needed here") -> Reader:
    """``only`` for a field of transformers 4's ``TrainingArguments``."""
    return only(allowed, why_not, why, TRANSFORMERS_4)


def warmup_ratio(t: Translation, key: str, value: Any, values: Mapping[str, Any]) -> None:
    """transformers 4's ``warmup_ratio`` (5 reads a ``warmup_steps`` under 1 as the ratio): the steps win when set."""
    set_warmup(t, "warmup_steps", values.get("warmup_steps"), key, value)
    if value and not values.get("warmup_steps"):
        t.note(key, f"{TRANSFORMERS_4}, read as scheduler.warmup_ratio (transformers 5: a warmup_steps under 1)")


def group_by_length(t: Translation, key: str, value: Any, values: Mapping[str, Any]) -> None:
    """transformers 4's ``group_by_length`` (5: ``train_sampling_strategy: group_by_length``)."""
    if value is True:
        t.set("data.group_by_length", True)
    t.note(key, f"{TRANSFORMERS_4}, read as data.group_by_length: {bool(value)}")


def renamed(new: str) -> Reader:
    """A field transformers 5 has under ``new``: refused when set, naming the new name; null (as a dump of
    ``TrainingArguments`` writes it) asks for nothing."""

    def read(t: Translation, key: str, value: Any, values: Mapping[str, Any]) -> None:
        if value is None or (key == "push_to_hub_token" and value == "<PUSH_TO_HUB_TOKEN>"):  # the dump's mask
            t.note(key, f"{TRANSFORMERS_4}: {value!r}, not set")
        else:
            t.refuse(key, f"{TRANSFORMERS_4}: give it as {new}, the name transformers 5 reads")

    return read


TRAINING_ARGUMENTS: dict[str, Reader] = {
    "warmup_ratio": warmup_ratio,
    "group_by_length": group_by_length,
    "adafactor": only4((False,), "give optim: adafactor (transformers 5's name)"),
    "overwrite_output_dir": note4(
        "honing starts a run afresh unless trainer.load_strategy says otherwise, and writes over an earlier run's "
        "checkpoints only with trainer.save_overwrite"
    ),
    "logging_dir": note4("honing's TensorBoard events go to the save folder (callbacks.tensorboard)"),
    "save_safetensors": only4(
        (True,), "honing's hf/ export is always safetensors", "honing's hf/ export is safetensors"
    ),
    "no_cuda": only4((False,), "hide the GPUs (CUDA_VISIBLE_DEVICES=) to train on the CPU"),
    "use_mps_device": note4("honing picks the device itself"),
    "half_precision_backend": note4("honing's mixed precision is torch's autocast (trainer.precision)"),
    "fp16_backend": note4("honing's mixed precision is torch's autocast (trainer.precision)"),
    "fp16_opt_level": note4("apex's levels; honing's mixed precision is torch's autocast (trainer.precision)"),
    "include_tokens_per_second": note4("honing logs throughput every step (callbacks.speed_monitor)"),
    "fsdp_min_num_params": note4("honing's FSDP2 shards each transformer block by itself"),
    "fsdp_transformer_layer_cls_to_wrap": note4("honing's FSDP2 shards each transformer block by itself"),
    "per_gpu_train_batch_size": renamed("per_device_train_batch_size"),
    "per_gpu_eval_batch_size": renamed("per_device_eval_batch_size"),
    "push_to_hub_model_id": renamed("hub_model_id"),
    "push_to_hub_organization": renamed("hub_model_id (ORGANIZATION/NAME)"),
    "push_to_hub_token": renamed("hub_token"),
    "torchdynamo": renamed("torch_compile_backend"),
    **{
        name: note4("not used by honing's loop (evaluation by loss, no TPU, no SageMaker, no Ray tuning)")
        for name in (
            "past_index",
            "ray_scope",
            "jit_mode_eval",
            "include_inputs_for_metrics",
            "use_legacy_prediction_loop",
            "tpu_num_cores",
            "tpu_metrics_debug",
            "mp_parameters",
        )
    },  # fmt: skip
}


def former_fields(config_class: str) -> dict[str, Reader]:
    """The dropped fields of ``config_class`` and of transformers' ``TrainingArguments`` under it."""
    return {**TRAINING_ARGUMENTS, **FORMER_FIELDS.get(config_class, {})}


def read_former_field(t: Translation, config_class: str, key: str, value: Any, values: Mapping[str, Any]) -> bool:
    """Read ``key`` as the earlier release of ``config_class`` did; False when no earlier release had it."""
    reader = former_fields(config_class).get(key)
    if reader is None:
        return False
    reader(t, key, value, values)
    return True
