"""``training.*`` keys of an olmOCR config that olmOCR's ``TrainingConfig`` lacks but transformers'
``TrainingArguments`` has (``bf16``, ``tf32``, ``max_steps``, ``warmup_steps``, ``dataloader_pin_memory``, ...): forks
hand their ``training`` section to a ``TrainingArguments``, so each is read through honing's translation of that class
(``hf_training_args_table``): honoured, moot with a note, or refused in one line, as its row says. olmOCR's own keys
are read first (``olmocr_trainer.translate_training``) and keep their olmOCR meaning."""

from __future__ import annotations

from typing import Any

from honing.interop.configs.hf_training_args_table import TRAINING_ARGUMENTS
from honing.interop.configs.llamafactory import translate_engine, translate_outputs, translate_training
from honing.interop.configs.schema_table import finish
from honing.interop.configs.translation import Keys, Translation
from honing.interop.configs.trl_method_keys import class_fields

SOURCE = "transformers' TrainingArguments"
# the keys translate_outputs reads; it fills the evaluation, checkpoint, logging and tracker settings from them
# (absent ones from transformers' defaults), so the values olmOCR's keys gave are handed back to it unchanged
OUTPUT_KEYS = frozenset({
    "output_dir", "seed", "data_seed", "resume_from_checkpoint", "overwrite_output_dir", "save_strategy", "save_steps",
    "save_total_limit", "eval_strategy", "evaluation_strategy", "eval_steps", "per_device_eval_batch_size",
    "metric_for_best_model", "greater_is_better", "load_best_model_at_end", "logging_strategy", "logging_steps",
    "report_to", "run_name", "project", "train_sampling_strategy", "enable_torch_profiler", "push_to_hub",
    "hub_model_id", "hub_strategy", "hub_private_repo", "hub_revision",
})  # fmt: skip


def translate_hf_fields(t: Translation, training: Keys) -> None:
    """Every key of ``training`` not read yet that is a ``TrainingArguments`` field, through that class's
    translation; the keys left after it are neither olmOCR's nor transformers' (``training.done`` refuses them)."""
    fields = class_fields("TrainingArguments")
    left = {name: value for name, value in training.values.items() if name not in training.taken and name in fields}
    if not left:
        return
    training.taken.update(left)
    values: dict[str, Any] = dict(left)
    if values.get("bf16") and str(t.get("trainer.precision", "")).startswith("bf16"):
        values.pop("bf16")  # olmOCR's bf16 weights already: its precision (trainer.precision) stays as it is
        t.note(training.key("bf16"), f"the run is in {t.get('trainer.precision')} already (olmOCR's dtype)")
    if values.get("fp16") and str(t.get("trainer.precision", "")).startswith("bf16"):
        t.refuse(training.key("fp16"), "true with bf16: transformers refuses both; keep one")
        values.pop("fp16")
    hf = t.section(values, training.prefix)
    notes, refused = len(t.notes), len(t.refused)
    translate_training(t, hf)
    if hf.has("warmup_steps") or "scheduler.warmup_steps" in t.explicit:
        drop_default_ratio(t)
    translate_engine(t, hf, None)
    if OUTPUT_KEYS & set(values):
        hf.values.update({name: value for name, value in current_outputs(t).items() if name not in values})
        translate_outputs(t, hf)
    finish(hf, TRAINING_ARGUMENTS, fields, SOURCE)
    # the shared readers name a key as a TRL file has it (top level): here it sits under training
    prefix = f"{training.prefix}."
    t.notes[notes:] = [line if line.startswith(prefix) else prefix + line for line in t.notes[notes:]]
    t.refused[refused:] = [line if line.startswith(prefix) else prefix + line for line in t.refused[refused:]]


def drop_default_ratio(t: Translation) -> None:
    """``warmup_steps`` > 0 wins over a ratio (transformers' rule, and the forks'): olmOCR's default ratio goes."""
    if t.get("scheduler.warmup_steps") and "scheduler.warmup_ratio" in t.defaults:
        t.unset("scheduler.warmup_ratio")


def current_outputs(t: Translation) -> dict[str, Any]:
    """The evaluation, checkpoint, logging and tracker settings olmOCR's keys gave, as ``TrainingArguments`` values
    that ``translate_outputs`` turns back into the same honing keys."""
    trackers = [name for name in ("wandb", "tensorboard") if t.get(f"callbacks.{name}.enabled")]
    every_epoch = t.get("callbacks.evaluator.every_epoch")
    return {
        "eval_strategy": "epoch" if every_epoch else "steps",
        "eval_steps": None if every_epoch else t.get("callbacks.evaluator.interval"),
        "save_strategy": "steps",
        "save_steps": t.get("callbacks.checkpointer.save_interval"),
        "logging_steps": t.get("callbacks.console.log_interval"),
        "report_to": trackers or "none",
    }
