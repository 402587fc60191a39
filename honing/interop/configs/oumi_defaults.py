"""What an Oumi run gets where its config says nothing, written as honing's keys where honing's own default differs.

Oumi passes its ``TrainingParams`` defaults to transformers' ``TrainingArguments`` or TRL's ``SFTConfig`` /
``DPOConfig`` / ``GRPOConfig`` explicitly (learning rate 5e-5, 3 epochs, 8 rows per device, seed 42, a linear
schedule to 0, ...); what Oumi does not pass keeps TRL's default (no packing, 1024 tokens). The TRL defaults are
those of the TRL versions Oumi pins (``trl>=0.24,<1.5``), where they agree. Every value filled in here is listed in
the header ``honing convert`` writes.
"""

from __future__ import annotations

from honing.interop.configs.hf_args import set_hf_defaults
from honing.interop.configs.translation import Translation

# TRL's SFTConfig / DPOConfig max_length: rows are cut to it (Oumi passes none; its packing length is 1024 as well)
TRL_MAX_LENGTH = 1024
# TRL's GRPOConfig max_prompt_length (0.24) and max_completion_length (0.24 - 1.4): honing's data.seq_len holds both
TRL_GRPO_PROMPT_LENGTH = 512
TRL_GRPO_COMPLETION_LENGTH = 256
# Oumi's GrpoParams.temperature, passed to TRL's GRPOConfig (whose own default is 1.0)
OUMI_GRPO_TEMPERATURE = 0.9


def fill_defaults(t: Translation, method: str, trainer: str) -> None:
    """The Oumi run's defaults (Oumi's own, then TRL's and transformers') as honing's keys, for ``method`` trained
    by Oumi's ``trainer`` (``training.trainer_type``)."""
    set_hf_defaults(t, whose="Oumi's training.")
    t.default("optim.name", "adamw_torch", "Oumi's training.optimizer")
    t.default("optim.lr", 5e-5, "Oumi's training.learning_rate")
    t.default("trainer.max_duration", "3epochs", "Oumi's training.num_train_epochs")
    t.default("trainer.seed", 42, "Oumi's training.seed")
    t.default("trainer.save_folder", "output", "Oumi's training.output_dir")
    # Oumi starts afresh unless told to resume. It would also write over an earlier run's checkpoints; honing never
    # does unless asked (trainer.save_overwrite): a folder that holds them is refused, naming that key
    t.default("trainer.load_strategy", "never", "Oumi's training.try_resume_from_last_checkpoint: false")
    t.default("callbacks.checkpointer.save_interval", 500, "Oumi's training.save_steps")
    t.default("callbacks.console.log_interval", 50, "Oumi's training.logging_steps")
    t.default("callbacks.tensorboard.enabled", True, "Oumi's training.enable_tensorboard")
    if method in ("sft", "vl_sft"):
        t.default("data.seq_len", TRL_MAX_LENGTH, sft_length_source(method, trainer))
        t.default("data.packing", False, "TRL's SFTConfig.packing")
        # Oumi's datasets and collators label every token unless a completions-only collator or kwarg says not
        t.default("data.train_on", "all", "Oumi's text_with_padding / vision-language collators label every token")
    if method in ("sft", "vl_sft", "dpo", "vl_dpo", "kto"):
        # transformers 5's train_sampling_strategy "random" (4.x: group_by_length false): batches in random order
        t.default("data.group_by_length", False, "transformers' TrainingArguments.train_sampling_strategy: random")
    if method in ("dpo", "vl_dpo"):
        t.default("data.seq_len", TRL_MAX_LENGTH, "TRL's DPOConfig.max_length")
    if method == "kto":
        t.default("data.seq_len", TRL_MAX_LENGTH, "TRL's KTOConfig.max_length")
    if method == "pretrain":
        t.default("data.seq_len", TRL_MAX_LENGTH, "Oumi's packing length without model.model_max_length")
    if method in ("vl_sft", "vl_grpo", "vl_dpo"):
        # Oumi trains the vision tower unless freeze_layers names it; honing's vl_sft freezes it by default
        t.default("model.freeze_vision", False, "Oumi trains every module that freeze_layers does not name")
    if method in ("grpo", "vl_grpo"):
        # Oumi passes it to TRL's GRPOConfig and to verl's rollout alike
        t.default("grpo.temperature", OUMI_GRPO_TEMPERATURE, "Oumi's training.grpo.temperature")
        # the TRL versions Oumi pins sample 256 tokens (honing's default is TRL 1.5's 512)
        t.default("grpo.max_completion_length", TRL_GRPO_COMPLETION_LENGTH, "TRL's GRPOConfig.max_completion_length")


def sft_length_source(method: str, trainer: str) -> str:
    """Whose row length 1024 is for fine-tuning: TRL's cut; Oumi's image collators and transformers' Trainer cut
    nothing (then the longest row must fit: a row cut through an image is refused, by name)."""
    if trainer == "TRL_SFT" and method == "sft":
        return "TRL's SFTConfig.max_length"
    return "TRL's SFTConfig.max_length; this Oumi trainer and collator cut no row: raise it for longer rows"


def fill_grpo_length(t: Translation, verl: bool) -> None:
    """GRPO's ``data.seq_len`` (prompt room + completion) where no prompt length was given: TRL's or verl's 512
    tokens of prompt; called once ``grpo.max_completion_length`` is known."""
    completion = int(t.get("grpo.max_completion_length", TRL_GRPO_COMPLETION_LENGTH))
    whose = "verl's data.max_prompt_length" if verl else "TRL's GRPOConfig.max_prompt_length"
    t.default("data.seq_len", TRL_GRPO_PROMPT_LENGTH + completion, f"{whose} 512 + the completion's length")
