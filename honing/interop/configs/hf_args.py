"""Keys that Oumi and olmOCR both hand to Hugging Face's ``TrainingArguments``: optimizer and schedule names, and
the defaults a run gets from it, written as honing's keys."""

from __future__ import annotations

import math
import re
from typing import Any

from honing.config.optim_schema import METRIC_SCHEDULES, TRANSFORMERS_SCHEDULES
from honing.config.optimizers import resolve_optimizer
from honing.interop.configs.translation import Keys, Translation, read_number, schema_has

# TrainingArguments' optimizer defaults where honing's differ (field -> honing key, value): betas (0.9, 0.999), no
# weight decay (its epsilon 1e-8 and gradient clipping at 1.0 are honing's too)
OPTIM_DEFAULTS: dict[str, tuple[str, Any]] = {
    "adam_beta1 / adam_beta2": ("optim.betas", [0.9, 0.999]),
    "weight_decay": ("optim.weight_decay", 0.0),
}

# Hugging Face's names of AdamW with 8-bit states (bitsandbytes): honing's AdamW with torchao's 8-bit states
EIGHT_BIT_ADAMW = ("adamw_8bit", "adamw_bnb_8bit", "paged_adamw_8bit", "adamw_torch_8bit")

# transformers' AdamW for one device's own kernels -> that device
DEVICE_ADAMW = {"adamw_torch_xla": "XLA", "adamw_torch_npu_fused": "Ascend NPU"}
# transformers' OptimizerNames (5.x) that honing has not built: refused, named as transformers' own
TRANSFORMERS_OPTIMIZERS = frozenset(
    {"adamw_anyprecision", "adamw_torch_4bit", "ademamix", "adagrad", "ademamix_8bit", "paged_ademamix_32bit",
     "paged_ademamix_8bit", "rmsprop", "rmsprop_bnb", "rmsprop_bnb_8bit", "rmsprop_bnb_32bit", "galore_adamw",
     "galore_adamw_8bit", "galore_adafactor", "galore_adamw_layerwise", "galore_adamw_8bit_layerwise",
     "galore_adafactor_layerwise", "lomo", "adalomo", "grokadamw", "schedule_free_radam", "schedule_free_adamw",
     "schedule_free_sgd", "apollo_adamw", "apollo_adamw_layerwise", "stable_adamw"}
)  # fmt: skip

# bitsandbytes' paged 32-bit AdamW: AdamW whose states page to host memory under pressure
PAGED_ADAMW = ("paged_adamw_32bit", "paged_adamw")


def set_hf_defaults(t: Translation, whose: str = "transformers' TrainingArguments.") -> None:
    """The optimizer and schedule settings a Hugging Face ``Trainer`` run has when its config says nothing
    (``whose``: the prefix of the field names in the header, e.g. ``Oumi's training.``, which passes the same
    values)."""
    for field, (path, value) in OPTIM_DEFAULTS.items():
        t.default(path, value, f"{whose}{field}")
    set_schedule_defaults(t, "linear", f"{whose}lr_scheduler_type")


def set_schedule_defaults(t: Translation, name: str, whose: str) -> None:
    """A Hugging Face Trainer's schedule where the file names none: transformers' ``name`` (``whose`` default),
    step for step as ``transformers.get_scheduler`` (its warmup from 0, its decay to 0)."""
    t.default("scheduler.semantics", "transformers", "transformers' get_scheduler: each step's LR as the Trainer's")
    t.default("scheduler.name", name, whose)


def set_optimizer(t: Translation, key: str, name: str) -> None:
    """A Hugging Face optimizer name as ``optim.name`` (honing accepts transformers' names as aliases); its 8-bit
    AdamW names as AdamW with 8-bit states."""
    lowered = name.strip().lower()
    if lowered in EIGHT_BIT_ADAMW:
        t.set("optim.name", "adamw")
        t.set("optim.state_dtype", "int8")
        if lowered.startswith("paged"):
            t.note(
                key,
                f"{name!r}: AdamW with 8-bit states (torchao); bitsandbytes' paging of states to host memory under "
                "pressure is not done (parallel.offload: optimizer holds them on the host)",
            )
        return
    if lowered in PAGED_ADAMW:
        t.set("optim.name", "adamw")
        t.note(key, f"{name!r}: AdamW; bitsandbytes' paging of states to host memory under pressure is not done "
                    "(parallel.offload: optimizer holds them on the host)")  # fmt: skip
        return
    if lowered in DEVICE_ADAMW:
        t.set("optim.name", "adamw")
        t.note(key, f"{name!r}: torch's AdamW (the same update; that name picks {DEVICE_ADAMW[lowered]}'s kernel)")
        return
    try:
        resolve_optimizer(name)
    except ValueError as error:
        if lowered in TRANSFORMERS_OPTIMIZERS:  # a name transformers knows: say it is known, and not built here
            choices = str(error).partition("; ")[2]  # "expected one of: ..."
            t.refuse(key, f"{name!r} is one of transformers' optimizers honing has not built; {choices}")
        else:
            t.refuse(key, str(error))
        return
    t.set("optim.name", name)


def optimizer_family(name: str) -> str:
    """honing's optimizer (``adamw``, ``sgd``, ...) for a Hugging Face name; ``adamw`` for a name it refuses."""
    if name.strip().lower() in EIGHT_BIT_ADAMW:
        return "adamw"
    try:
        return resolve_optimizer(name)[0]
    except ValueError:
        return "adamw"


def set_schedule(t: Translation, key: str, name: str, kwargs: dict[str, Any] | None = None) -> None:
    """A ``lr_scheduler_type`` and its ``lr_scheduler_kwargs`` as transformers' own schedule in honing
    (``scheduler.semantics: transformers``): the LR of every step is the Hugging Face Trainer's."""
    kwargs_key = key.removesuffix("_type") + "_kwargs"  # lr_scheduler_type -> lr_scheduler_kwargs
    if kwargs is not None and not isinstance(kwargs, dict):
        t.refuse(kwargs_key, f"{kwargs!r}: expected a mapping of keys")
    kwargs = dict(kwargs) if isinstance(kwargs, dict) else {}
    if name in METRIC_SCHEDULES:
        t.refuse(key, f"{name!r} is not available: {METRIC_SCHEDULES[name]}")
        return
    if name not in TRANSFORMERS_SCHEDULES:
        t.refuse(key, f"{name!r} is not available; expected one of: {', '.join(TRANSFORMERS_SCHEDULES)}")
        return
    t.set("scheduler.semantics", "transformers")
    t.set("scheduler.name", name)
    reads = TRANSFORMERS_SCHEDULES[name]
    for extra, value in kwargs.items():
        if extra in reads:
            t.set(f"scheduler.kwargs.{extra}", value)
        elif name in ("constant", "constant_with_warmup"):  # get_scheduler hands these no kwargs at all
            t.note(f"{kwargs_key}.{extra}", f"ignored by transformers' {name!r}, as here")
        else:  # transformers' schedule function would fail on it (TypeError)
            reads_text = ", ".join(reads) or "none"
            t.refuse(f"{kwargs_key}.{extra}", f"not read by transformers' {name!r} (it reads: {reads_text})")
    drop_constant_warmup(t, key)


def translate_optimizer_numbers(t: Translation, top: Keys) -> None:
    """The Trainer's optimizer numbers, which axolotl and LLaMA-Factory name as ``TrainingArguments`` does:
    ``learning_rate``, ``weight_decay``, ``adam_beta1`` / ``adam_beta2``, ``adam_epsilon`` and ``max_grad_norm`` (0:
    no clipping) as ``optim.*``."""
    top.copy("learning_rate", "optim.lr", float)
    top.copy("weight_decay", "optim.weight_decay", float)
    if top.has("adam_beta1") or top.has("adam_beta2"):
        t.set("optim.betas", [top.number("adam_beta1", float, 0.9), top.number("adam_beta2", float, 0.999)])
    top.take("adam_beta1")
    top.take("adam_beta2")
    top.copy("adam_epsilon", "optim.eps", float)
    if "max_grad_norm" in top.values:
        norm = top.number("max_grad_norm", float)
        t.set("optim.grad_clip", norm if norm else None)


def translate_lr_schedule(t: Translation, top: Keys, key: str) -> Any:
    """The schedule named by ``key`` (axolotl's ``lr_scheduler``, transformers' ``lr_scheduler_type``) with
    ``lr_scheduler_kwargs``, as ``set_schedule`` reads them; returns the name (None when unset)."""
    name = top.take(key)
    kwargs = top.take("lr_scheduler_kwargs")
    if name is not None:
        set_schedule(t, key, str(name), kwargs)
    return name


def translate_neftune(t: Translation, top: Keys) -> None:
    """``neftune_noise_alpha`` as ``sft.neftune_noise_alpha`` where honing's schema has it."""
    neftune = top.take("neftune_noise_alpha")
    if neftune is not None:
        if schema_has("sft.neftune_noise_alpha"):
            t.set("sft.neftune_noise_alpha", float(neftune))
        else:
            t.refuse("neftune_noise_alpha", "not yet: honing has no NEFTune noise")


def drop_constant_warmup(t: Translation, key: str) -> None:
    """transformers' ``constant`` ignores the warmup: so does the translation, and its header says so (honing's
    config refuses a warmup that nothing reads)."""
    if t.get("scheduler.semantics") != "transformers" or t.get("scheduler.name") != "constant":
        return
    if t.get("scheduler.warmup_steps") or t.get("scheduler.warmup_ratio"):
        t.unset("scheduler.warmup_steps")
        t.unset("scheduler.warmup_ratio")
        t.note(
            key,
            "the warmup is ignored: transformers' 'constant' schedule has none (the LR is optim.lr from the first "
            "step), as here; 'constant_with_warmup' warms up",
        )


def set_warmup(t: Translation, steps_key: str, steps: Any, ratio_key: str, ratio: Any) -> None:
    """``warmup_steps`` / ``warmup_ratio`` (0 is unset, as in transformers, where steps win over a ratio)."""
    steps = read_number(t, steps_key, steps, int) if steps is not None else None
    ratio = read_number(t, ratio_key, ratio, float) if ratio is not None else None
    if steps:
        t.set("scheduler.warmup_steps", steps)
        if ratio:
            t.note(ratio_key, f"ignored because {steps_key} is set (transformers' rule)")
    elif ratio:
        t.set("scheduler.warmup_ratio", ratio)
    drop_constant_warmup(t, steps_key if steps else ratio_key)


def set_precision(t: Translation, key: str, dtype: str | None) -> None:
    """A model dtype name (``bfloat16``, ``float32``; ``bf16``, ``fp32``) as ``trainer.precision``."""
    if dtype is None:
        return
    name = str(dtype).lower()
    precision = {"bfloat16": "bf16", "bf16": "bf16", "float32": "fp32", "fp32": "fp32", "float": "fp32"}.get(name)
    if name in ("float16", "fp16", "half"):
        # weights held and computed in float16 without loss scaling, as transformers does for this dtype
        t.set("model.dtype", "float16")
    elif precision is None:
        t.refuse(key, f"{dtype!r} is not available; honing trains in float32, float16, bf16-mixed or bf16")
    else:
        t.set("trainer.precision", precision)


def duration(t: Translation, steps_key: str, steps: Any, epochs_key: str, epochs: Any) -> None:
    """``max_steps`` (> 0 wins, as in transformers) or ``num_train_epochs`` as ``trainer.max_duration``."""
    steps = read_number(t, steps_key, steps, int) if steps is not None else None
    epochs = read_number(t, epochs_key, epochs, float) if epochs is not None else None
    if steps is not None and steps > 0:
        t.set("trainer.max_duration", f"{steps}steps")
    elif epochs is not None:
        set_epochs(t, epochs_key, epochs)


def set_epochs(t: Translation, key: str, epochs: float) -> None:
    """``num_train_epochs`` as ``trainer.max_duration``: a fraction lasts ``ceil(epochs x steps per epoch)`` steps,
    as transformers' Trainer."""
    if not epochs > 0:
        t.refuse(key, f"{epochs!r}: give a positive number of epochs")
    elif epochs == int(epochs):
        t.set("trainer.max_duration", f"{int(epochs)}epochs")
    else:
        t.set("trainer.max_duration", f"{epochs!r}epochs")


def step_interval(t: Translation, key: str, value: Any, fraction_path: str | None = None) -> int | None:
    """transformers' ``logging_steps`` / ``eval_steps`` / ``save_steps`` as a number of steps: below 1 a ratio of the
    run's steps, ``ceil(ratio x max_steps)`` as transformers' ``TrainerState.compute_steps``. When the run is given
    in epochs (its steps are known only once the data is read) the ratio goes to honing's ``fraction_path``, which
    the trainer resolves the same way, or is refused in one line without one. None when unset, refused or a ratio."""
    number = read_number(t, key, value, float) if value is not None else None
    if number is None:
        return None
    if number >= 1:
        return int(number)
    if number <= 0:
        t.refuse(key, f"{value!r}: give a positive number of steps")
        return None
    duration = re.fullmatch(r"(\d+)steps", str(t.get("trainer.max_duration", "")))
    if duration is None and fraction_path is not None:
        t.set(fraction_path, number)
        return None
    if duration is None:
        t.refuse(key, f"{value!r}: a ratio of the run's steps, which max_steps does not give here (the run is given "
                      "in epochs); give a number of steps")  # fmt: skip
        return None
    return math.ceil(number * int(duration[1]))


def eval_strategy_of(t: Translation, top: Keys, default: str) -> str:
    """``eval_strategy``, or ``evaluation_strategy``, its name before transformers 4.46 (removed in 5), read alike."""
    old = top.take("evaluation_strategy")
    if old is not None and top.has("eval_strategy") and str(old) != str(top.peek("eval_strategy")):
        t.refuse("evaluation_strategy", f"{old!r}: the older name of eval_strategy, which says "
                                        f"{top.peek('eval_strategy')!r}; keep eval_strategy alone")  # fmt: skip
    elif old is not None:
        t.note("evaluation_strategy", "the older name of eval_strategy (renamed in transformers 4.46), read as it")
        if not top.has("eval_strategy"):
            top.take("eval_strategy")
            return str(old)
    return str(top.take("eval_strategy", default))


# transformers' logging_strategy values: when the Trainer reports the loss; none changes what is trained
LOGGING_STRATEGY_NOTES = {
    "no": "honing still records the metrics (metrics.jsonl, the trackers) every logging interval; training is the same",
    "epoch": "honing reports every logging interval (logging_steps), not once an epoch; training is the same",
}


def read_logging_strategy(t: Translation, key: str, value: Any) -> None:
    """transformers' ``logging_strategy``: ``steps`` is honing's interval; ``no`` / ``epoch`` a note each (how often
    the loss is reported changes no step); another value is refused."""
    strategy = "steps" if value is None else str(value).lower()
    if strategy in LOGGING_STRATEGY_NOTES:
        t.note(key, f"{strategy!r}: {LOGGING_STRATEGY_NOTES[strategy]}")
    elif strategy != "steps":
        t.refuse(key, f"{value!r} is not one of transformers' 'no', 'steps', 'epoch'")
