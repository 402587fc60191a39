"""Keys that Oumi and olmOCR both hand to Hugging Face's ``TrainingArguments``: optimizer and schedule names, and
the defaults a run gets from it, written as honing's keys."""

from __future__ import annotations

from typing import Any

from honing.interop.configs.translation import Translation, schema_has

# TrainingArguments' defaults where honing's differ: AdamW with betas (0.9, 0.999), no weight decay, and
# schedules that end at 0 (honing's end at min_lr_ratio x lr, 0.1 by default).
HF_OPTIM_DEFAULTS: dict[str, Any] = {"betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0, "grad_clip": 1.0}

# Hugging Face optimizer names that are AdamW (with torch's implementation, foreach or fused)
ADAMW_NAMES = ("adamw_torch", "adamw_torch_fused", "adamw_hf", "adamw", "adamw_torch_xla", "adamw_torch_npu_fused")

# lr_scheduler_type -> honing's scheduler.name; "constant" has no warmup in transformers, as in honing with 0 steps
SCHEDULES = {
    "linear": "linear",
    "cosine": "cosine",
    "cosine_with_min_lr": "cosine",
    "constant": "constant",
    "constant_with_warmup": "constant",
}


def set_hf_defaults(t: Translation) -> None:
    """The optimizer and schedule settings a Hugging Face ``Trainer`` run has when its config says nothing."""
    for name, value in HF_OPTIM_DEFAULTS.items():
        t.set(f"optim.{name}", value)
    t.set("scheduler.name", "linear")
    t.set("scheduler.min_lr_ratio", 0.0)


def set_optimizer(t: Translation, key: str, name: str) -> None:
    """A Hugging Face optimizer name as ``optim.name`` (honing accepts transformers' names as aliases)."""
    if schema_has("optim.name"):
        t.set("optim.name", name)
    elif name in ADAMW_NAMES:
        t.note(key, f"{name!r}: honing's AdamW (torch's, foreach or fused where the device allows)")
    else:
        t.refuse(key, f"{name!r} is not available: this honing trains with AdamW only")


def set_schedule(t: Translation, key: str, name: str, kwargs: dict[str, Any] | None = None) -> None:
    """A ``lr_scheduler_type`` (and its kwargs) as honing's ``scheduler.*``."""
    kwargs = dict(kwargs or {})
    if name not in SCHEDULES:
        t.refuse(key, f"{name!r} is not available; expected one of: {', '.join(SCHEDULES)}")
        return
    t.set("scheduler.name", SCHEDULES[name])
    if name == "cosine_with_min_lr":
        if "min_lr_rate" in kwargs:
            t.set("scheduler.min_lr_ratio", float(kwargs.pop("min_lr_rate")))
    for extra in kwargs:
        t.refuse(f"{key}_kwargs.{extra}", f"not translated for {name!r}")


def set_warmup(t: Translation, steps_key: str, steps: Any, ratio_key: str, ratio: Any) -> None:
    """``warmup_steps`` / ``warmup_ratio`` (0 is unset, as in transformers, where steps win over a ratio)."""
    if steps:
        t.set("scheduler.warmup_steps", int(steps))
        if ratio:
            t.note(ratio_key, f"ignored because {steps_key} is set (transformers' rule)")
    elif ratio:
        t.set("scheduler.warmup_ratio", float(ratio))


def set_precision(t: Translation, key: str, dtype: str | None) -> None:
    """A model dtype name (``bfloat16``, ``float32``; ``bf16``, ``fp32``) as ``trainer.precision``."""
    if dtype is None:
        return
    precision = {"bfloat16": "bf16", "bf16": "bf16", "float32": "fp32", "fp32": "fp32", "float": "fp32"}.get(
        str(dtype).lower()
    )
    if precision is None:
        t.refuse(key, f"{dtype!r} is not available; honing trains in float32, bf16-mixed or bf16")
    else:
        t.set("trainer.precision", precision)


def duration(t: Translation, steps_key: str, steps: Any, epochs_key: str, epochs: Any) -> None:
    """``max_steps`` (> 0 wins, as in transformers) or ``num_train_epochs`` as ``trainer.max_duration``."""
    if steps is not None and int(steps) > 0:
        t.set("trainer.max_duration", f"{int(steps)}steps")
    elif epochs is not None:
        if float(epochs) != int(float(epochs)) or float(epochs) < 1:
            t.refuse(epochs_key, f"{epochs!r}: honing trains whole epochs; give an integer >= 1 or {steps_key}")
        else:
            t.set("trainer.max_duration", f"{int(float(epochs))}epochs")
