"""TRL's config classes (and transformers' ``TrainingArguments`` under them) as honing's config: the keys of one
class, as ``DPOConfig(**values)`` takes them, translated key by key through the verdict tables
(``hf_training_args_table``, ``trl_*_table``). ``transformers``' own keys are read as LLaMA-Factory's file carries
them (``llamafactory.translate_training`` / ``translate_engine`` / ``translate_outputs``: the same fields); each
class's own keys here. Where the values say nothing, the class's defaults are written where honing's differ."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from honing.interop.configs.hf_args import set_schedule_defaults, set_warmup
from honing.interop.configs.hf_training_args_table import TRAINING_ARGUMENTS
from honing.interop.configs.key_tables import key_table
from honing.interop.configs.llamafactory import translate_engine, translate_outputs, translate_training
from honing.interop.configs.schema_table import Entry, Value, finish
from honing.interop.configs.translation import Keys, Translation
from honing.interop.configs.trl_former_fields import former_fields, read_former_field
from honing.interop.configs.trl_grpo_batch import generation_batch_as_steps
from honing.interop.configs.trl_method_keys import READERS, class_default, class_fields
from honing.interop.configs.trl_online_table import GRPO, RLOO
from honing.interop.configs.trl_preference_table import CPO, DPO, KTO, ORPO, REWARD
from honing.interop.configs.trl_sft_table import GKD, SFT

SOURCE = key_table("trl").source

# each class's honing method and its own rows (TrainingArguments' rows under them)
CLASSES: dict[str, tuple[str, dict[str, Entry]]] = {
    "TrainingArguments": ("sft", {}),
    "SFTConfig": ("sft", SFT),
    "DPOConfig": ("dpo", DPO),
    "KTOConfig": ("kto", KTO),
    "ORPOConfig": ("orpo", ORPO),
    "CPOConfig": ("cpo", CPO),
    "RewardConfig": ("reward", REWARD),
    "GRPOConfig": ("grpo", GRPO),
    "RLOOConfig": ("rloo", RLOO),
    "GKDConfig": ("distill", GKD),
}

# train_sampling_strategy's values honing has: shuffled, in file order, similar lengths together
SAMPLERS = ("random", "sequential", "group_by_length")


def table(config_class: str) -> dict[str, Entry]:
    """Every field of ``config_class`` with its verdict."""
    return {**TRAINING_ARGUMENTS, **CLASSES[config_class][1]}


def translate_trl_args(values: Mapping[str, Value], config_class: str, processes: int | None = None) -> Translation:
    """honing's config for the keyword arguments of TRL's ``config_class`` (or ``TrainingArguments``), with
    refusals, notes and the class's defaults filled in; a key the class does not have is refused by name.
    ``processes``: the launcher's process count where the file gives it (TRL's ``generation_batch_size`` needs it)."""
    if config_class not in CLASSES:
        raise ValueError(f"{config_class!r}: expected one of {', '.join(CLASSES)}")
    t = Translation(f"TRL {config_class}")
    fields = class_fields(config_class)
    if "generation_batch_size" in fields:  # GRPOConfig / RLOOConfig: read as the steps_per_generation it sets
        values = dict(values)
        steps, why = generation_batch_as_steps(values, partial(class_default, config_class), processes)
        if why is not None:
            t.refuse("generation_batch_size", why)
        elif steps is not None:
            t.note("generation_batch_size", f"on {processes} processes: steps_per_generation {steps}, as TRL sets it")
    dropped = former_fields(config_class)  # fields an earlier TRL or transformers 4 had
    former = {name: value for name, value in values.items() if name not in fields and name in dropped}
    for name in values:
        if name not in fields and name not in former:
            t.refuse(name, f"not a field of {config_class} ({SOURCE}); check its spelling")
    top = t.section({name: value for name, value in values.items() if name in fields}, "")
    method = CLASSES[config_class][0]
    t.set("method", method)
    fill_defaults(t, top, config_class)
    translate_training_args(t, top, config_class, method)
    READERS[config_class](t, top, config_class)
    finish(top, table(config_class), fields, f"TRL's {config_class} ({SOURCE})")
    for name, value in former.items():  # after the class's own keys: a former length may build on them
        read_former_field(t, config_class, name, value, values)
    return t


def fill_defaults(t: Translation, top: Keys, config_class: str) -> None:
    """The class's defaults where honing's differ (each listed in the header with whose it is)."""
    whose = f"{config_class}."
    t.default("data.micro_batch_size", 8, f"{whose}per_device_train_batch_size")
    t.default("data.batch_size_per_rank", 8, f"{whose}per_device_train_batch_size x gradient_accumulation_steps")
    t.default("trainer.max_duration", "3epochs", f"{whose}num_train_epochs")
    t.default("optim.lr", class_default(config_class, "learning_rate"), f"{whose}learning_rate")
    t.default("optim.weight_decay", 0.0, f"{whose}weight_decay")
    t.default("optim.betas", [0.9, 0.999], f"{whose}adam_beta1 / adam_beta2")
    set_schedule_defaults(t, "linear", f"{whose}lr_scheduler_type")
    t.default("trainer.seed", 42, f"{whose}seed")
    t.default("callbacks.checkpointer.save_interval", 500, f"{whose}save_steps")
    t.default("callbacks.console.log_interval", class_default(config_class, "logging_steps"), f"{whose}logging_steps")
    if class_default(config_class, "train_sampling_strategy") == "random" and method_groups(config_class):
        t.default("data.group_by_length", False, f"{whose}train_sampling_strategy")
    if class_default(config_class, "train_sampling_strategy") == "sequential" and not top.has(
        "train_sampling_strategy"
    ):
        t.default("data.shuffle", False, f"{whose}train_sampling_strategy")
    if config_class != "TrainingArguments":  # _BaseConfig: bf16 unless fp16, activation checkpointing on
        if top.peek("bf16") is not False and not top.peek("fp16"):
            t.default("trainer.precision", "bf16-mixed", f"{whose}bf16 (on unless fp16)")
        t.default("parallel.activation_checkpointing", "full", f"{whose}gradient_checkpointing")


def method_groups(config_class: str) -> bool:
    """True for a class whose method reads ``data.group_by_length`` (the offline ones)."""
    return CLASSES[config_class][0] not in ("grpo", "rloo")


def translate_training_args(t: Translation, top: Keys, config_class: str, method: str) -> None:
    """``TrainingArguments``' keys, as LLaMA-Factory's translator reads them, with what differs under TRL."""
    if top.has("bf16") and top.peek("bf16") is False:
        top.take("bf16")  # fp32: honing's own default
    for name in ("gradient_checkpointing", "activation_checkpointing"):
        if top.peek(name) is False:
            top.take(name)
            t.set("parallel.activation_checkpointing", "none")
    if top.peek("activation_checkpointing"):
        top.take("activation_checkpointing")
        t.set("parallel.activation_checkpointing", "full")
    sampling = top.peek("train_sampling_strategy")
    if sampling is not None and sampling not in SAMPLERS:
        top.refuse("train_sampling_strategy", f"{sampling!r} is not available; expected one of: {', '.join(SAMPLERS)}")
    warmup = top.number("warmup_steps", float)  # transformers 5: a fraction < 1 is a ratio of the run
    eos = top.take("eos_token")  # SFT's / DPO's: the token that ends a turn, set on the tokenizer
    if eos is not None:
        t.set("tokenizer.special_tokens", {"eos_token": str(eos)})
    if method != "sft":
        top.refuse("neftune_noise_alpha", table(config_class)["neftune_noise_alpha"][1])
    translate_training(t, top)
    if warmup:
        steps, ratio = (int(warmup), None) if warmup >= 1 else (None, warmup)
        set_warmup(t, "warmup_steps", steps, "warmup_ratio", ratio)
    top.copy("dataloader_num_workers", "data.num_workers", int)
    translate_engine(t, top, None)
    eval_given = top.has("eval_steps")
    translate_outputs(t, top)
    if t.get("callbacks.evaluator.interval") is not None and not eval_given and not top.has("logging_steps"):
        # transformers: eval_steps unset is logging_steps, whose default TRL changes
        t.set("callbacks.evaluator.interval", int(class_default(config_class, "logging_steps")))
