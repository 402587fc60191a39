"""Keys that Oumi and olmOCR both hand to Hugging Face's ``TrainingArguments``: optimizer and schedule names, and
the defaults a run gets from it, written as honing's keys."""

from __future__ import annotations

from typing import Any

from honing.config.optimizers import resolve_optimizer
from honing.interop.configs.translation import Translation, read_number

# TrainingArguments' optimizer defaults where honing's differ (field -> honing key, value): betas (0.9, 0.999), no
# weight decay (its epsilon 1e-8 and gradient clipping at 1.0 are honing's too)
OPTIM_DEFAULTS: dict[str, tuple[str, Any]] = {
    "adam_beta1 / adam_beta2": ("optim.betas", [0.9, 0.999]),
    "weight_decay": ("optim.weight_decay", 0.0),
}

# Hugging Face's names of AdamW with 8-bit states (bitsandbytes): honing's AdamW with torchao's 8-bit states
EIGHT_BIT_ADAMW = ("adamw_8bit", "adamw_bnb_8bit", "paged_adamw_8bit", "adamw_torch_8bit")

# bitsandbytes' paged 32-bit AdamW: AdamW whose states page to host memory under pressure
PAGED_ADAMW = ("paged_adamw_32bit", "paged_adamw")

# lr_scheduler_type -> honing's scheduler.name; "constant" has no warmup in transformers, as in honing with 0 steps
SCHEDULES = {
    "linear": "linear",
    "cosine": "cosine",
    "cosine_with_min_lr": "cosine",
    "constant": "constant",
    "constant_with_warmup": "constant",
}


def set_hf_defaults(t: Translation, whose: str = "transformers' TrainingArguments.") -> None:
    """The optimizer and schedule settings a Hugging Face ``Trainer`` run has when its config says nothing
    (``whose``: the prefix of the field names in the header, e.g. ``Oumi's training.``, which passes the same values);
    transformers' schedules decay to 0 where honing's end at ``min_lr_ratio`` x lr, 0.1 by default."""
    for field, (path, value) in OPTIM_DEFAULTS.items():
        t.default(path, value, f"{whose}{field}")
    t.default("scheduler.name", "linear", f"{whose}lr_scheduler_type")
    t.default("scheduler.min_lr_ratio", 0.0, "transformers' schedules decay to 0")


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
    try:
        resolve_optimizer(name)
    except ValueError as error:
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
    """A ``lr_scheduler_type`` (and its kwargs) as honing's ``scheduler.*``."""
    if kwargs is not None and not isinstance(kwargs, dict):
        t.refuse(f"{key}_kwargs", f"{kwargs!r}: expected a mapping of keys")
    kwargs = dict(kwargs) if isinstance(kwargs, dict) else {}
    if name not in SCHEDULES:
        t.refuse(key, f"{name!r} is not available; expected one of: {', '.join(SCHEDULES)}")
        return
    t.set("scheduler.name", SCHEDULES[name])
    if name == "cosine_with_min_lr":
        if "min_lr_rate" in kwargs:
            ratio = read_number(t, f"{key}_kwargs.min_lr_rate", kwargs.pop("min_lr_rate"), float)
            if ratio is not None:
                t.set("scheduler.min_lr_ratio", ratio)
    if name.startswith("cosine") and kwargs.get("num_cycles") in (0.5, "0.5"):
        kwargs.pop("num_cycles")  # transformers' default: half a cosine wave, to the end, as honing's
    for extra in kwargs:
        t.refuse(f"{key}_kwargs.{extra}", f"not translated for {name!r}")


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
        if epochs != int(epochs) or epochs < 1:
            t.refuse(epochs_key, f"{epochs!r}: honing trains whole epochs; give an integer >= 1 or {steps_key}")
        else:
            t.set("trainer.max_duration", f"{int(epochs)}epochs")
