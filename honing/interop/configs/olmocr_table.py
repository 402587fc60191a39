"""Every key of olmOCR's current training config (``olmocr_keys.KEYS``: ``Config``, its ``model`` / ``dataset`` /
``training`` sections, a data set entry, and each pipeline step's dataclass as ``pipeline[<step>]``) with its
verdict: honoured (the honing key it becomes), moot (why honing needs no such setting: a note when set) or refused
(why, and what to give instead: one line when set). ``olmocr_trainer.py`` and ``olmocr_pipeline.py`` read the keys;
``test_olmocr_schema_walk.py`` checks every row against the translation."""

from __future__ import annotations

from honing.interop.configs.schema_table import Entry, honoured, moot, refused

TOP: dict[str, Entry] = {
    **honoured("model.* (the model section)", "model"),
    **honoured("data.train / data.validation (format: olmocr_pages)", "dataset"),
    **honoured("trainer.*, optim.*, scheduler.*, callbacks.* (the training section)", "training"),
    **honoured("callbacks.wandb.project", "project_name"),
    **honoured("run_name (and the save folder: output_dir/run_name)", "run_name"),
    **moot("not needed: a label for W&B only", "tags", "notes"),
    **moot("not needed: unused by olmOCR's trainer (training.report_to decides)", "experiment_tracker"),
    **moot("not needed: unused by olmOCR's trainer (project_name names the W&B project)", "wandb_project"),
    **moot("not needed: unused by olmOCR's trainer", "wandb_entity"),
    **moot("not needed: honing runs one process or many the same way (torchrun)", "distributed"),
    **moot("not needed: honing reads the rank from torchrun's environment", "local_rank"),
}

MODEL: dict[str, Entry] = {
    **honoured("model.name_or_path", "name"),
    **honoured("model.trust_remote_code", "trust_remote_code"),
    **honoured("model.quantize: int8", "load_in_8bit"),
    **honoured("model.quantize: nf4", "load_in_4bit"),
    **honoured("trainer.precision (bfloat16: bf16, float16, float32)", "torch_dtype"),
    **honoured(
        "model.attn_implementation (false: attn_implementation unused, honing's default kernel)", "use_flash_attention"
    ),  # fmt: skip
    **honoured("model.attn_implementation", "attn_implementation"),
    **honoured("model.freeze_vision", "freeze_vision_tower"),
    **honoured("model.lora (false: model.lora null)", "use_lora"),
    **honoured("model.lora.rank", "lora_rank"),
    **honoured("model.lora.alpha", "lora_alpha"),
    **honoured("model.lora.dropout", "lora_dropout"),
    **honoured("model.lora.target_modules", "lora_target_modules"),
    **honoured("model.lora.modules_to_save", "lora_modules_to_save"),
    **moot("not needed: honing places the model itself (one device per process, or sharded by FSDP2)", "device_map"),
    **honoured("model.freeze_language", "freeze_language_model"),
}

DATASET: dict[str, Entry] = {
    **honoured("data.train.sources (one per entry, format: olmocr_pages)", "train"),
    **honoured("data.validation.sources (one per entry; its name: eval/<name>/loss)", "eval"),
}
ENTRY: dict[str, Entry] = {
    **honoured("data.<split>.sources[].path", "root_dir"),
    **honoured(
        "data.pdf_pages and data.pdf_longest_side (the first pipeline); another source's own steps: its pdf_pages",
        "pipeline",
    ),
    **honoured("data.<split>.sources[].max_samples", "max_samples"),
}

TRAINING: dict[str, Entry] = {
    **honoured("trainer.save_folder (output_dir/run_name)", "output_dir"),
    **honoured("trainer.max_duration (Nepochs)", "num_train_epochs"),
    **honoured("data.micro_batch_size and data.batch_size_per_rank", "per_device_train_batch_size"),
    **honoured("callbacks.evaluator.batch_size", "per_device_eval_batch_size"),
    **honoured("data.batch_size_per_rank (x per_device_train_batch_size)", "gradient_accumulation_steps"),
    **honoured("optim.lr", "learning_rate"),
    **honoured("scheduler.name (transformers' schedules, exactly)", "lr_scheduler_type"),
    **honoured("scheduler.warmup_ratio", "warmup_ratio"),
    **honoured("scheduler.kwargs", "lr_scheduler_kwargs"),
    **honoured("optim.name (adamw_torch, muon, ...)", "optim"),
    **honoured("optim.betas", "adam_beta1", "adam_beta2"),
    **honoured("optim.eps", "adam_epsilon"),
    **honoured("optim.weight_decay", "weight_decay"),
    **honoured("optim.grad_clip", "max_grad_norm"),
    **honoured("optim.momentum (optim muon; unused by other optimizers: noted)", "muon_momentum"),
    **honoured(
        "optim.muon_lr_multiplier_head / _embed / _scalar (optim muon, with optim.muon_adjust_lr: original; unused "
        "by other optimizers: noted)",
        "muon_lr_multiplier_head",
        "muon_lr_multiplier_embed",
        "muon_lr_multiplier_scalar",
    ),  # fmt: skip
    **honoured("parallel.activation_checkpointing: full", "gradient_checkpointing"),
    **moot("not needed: honing's activation checkpointing is non-reentrant", "gradient_checkpointing_kwargs"),
    **honoured(
        "callbacks.evaluator.interval (strategy 'steps'), callbacks.evaluator.every_epoch ('epoch')",
        "evaluation_strategy",
    ),
    **honoured("callbacks.evaluator.interval", "eval_steps"),
    **honoured("callbacks.checkpointer.save_interval (strategy 'steps')", "save_strategy"),
    **honoured("callbacks.checkpointer.save_interval", "save_steps"),
    **honoured("callbacks.checkpointer.keep_last", "save_total_limit"),
    **moot(
        "not needed: olmOCR's trainer only tracks the best value; honing logs every eval/<name>/loss",
        "load_best_model_at_end",
        "metric_for_best_model",
        "greater_is_better",
    ),  # fmt: skip
    **moot(
        "not needed: honing logs every callbacks.console.log_interval steps (TensorBoard under the folder)",
        "logging_dir",
        "logging_strategy",
        "logging_first_step",
    ),  # fmt: skip
    **honoured("callbacks.console.log_interval", "logging_steps"),
    **honoured("callbacks.wandb.enabled / callbacks.tensorboard.enabled", "report_to"),
    **honoured("trainer.seed", "seed"),
    **moot("not needed: honing's shuffle follows trainer.seed (olmOCR's draws from torch's RNG)", "data_seed"),
    **moot(
        "not needed: honing's loader always drops an epoch's last rows short of a full batch (as true)",
        "dataloader_drop_last",
    ),  # fmt: skip
    **honoured("data.num_workers", "dataloader_num_workers"),
    **honoured("data.seq_len", "collator_max_token_len"),
    **moot("not needed: honing's rows hold only what the model takes", "remove_unused_columns"),
    **honoured("parallel.compile", "torch_compile"),
    **moot(
        "not needed: honing compiles each block with torch.compile's defaults (inductor)",
        "torch_compile_backend",
        "torch_compile_mode",
        "torch_compile_fullgraph",
        "torch_compile_dynamic",
    ),  # fmt: skip
    **refused("not available: honing trains for trainer.max_duration", "use_early_stopping"),
    **moot(
        "not needed: unused while use_early_stopping is false (true is refused)",
        "early_stopping_patience",
        "early_stopping_threshold",
    ),  # fmt: skip
}

# pipeline steps: "name" is the step itself (the data.pdf_pages option it sets), "enabled: false" skips it
STEP_OPTIONS = {
    "FrontMatterParser": "the page's front matter read as PageResponse",
    "PDFRenderer": "data.pdf_longest_side (the page rendered)",
    "StaticLengthDocumentAnchoring": "data.pdf_pages.anchor_text_len",
    "FinetuningPrompt": "data.pdf_pages.prompt: plain",
    "NewYamlFinetuningPromptWithAnchoring": "data.pdf_pages.prompt: front_matter",
    "NewYamlFinetuningPromptWithNoAnchoring": "data.pdf_pages.prompt: front_matter (no anchor text)",
    "FrontMatterOutputFormat": "data.pdf_pages.reply: front_matter",
    "JSONOutputFormat": "data.pdf_pages.reply: json",
    "InstructUserMessages": "data.pdf_pages.prompt_first",
    "LatexBracketNormalizer": "data.pdf_pages.latex_brackets",
    "ReformatLatexBoldItalic": "data.pdf_pages.latex_bold_italic",
    "TableTransformation": "data.pdf_pages.tables",
    "Tokenizer": "the model's chat template (assistant tokens trained)",
    "RandomTokenFlipper": "data.pdf_pages.token_flip_rate",
    "FilterOutRotatedDocuments": "data.pdf_pages.skip_rotated",
    "DatasetTextRuleFilter": "data.pdf_pages.text_rules",
    "RotationAugmentation": "data.pdf_pages.rotation_probability",
    "AugraphyBasicAugmentations": "data.image_transforms (olmOCR's warp, brightness and JPEG ranges)",
}
STEP_KEYS: dict[str, dict[str, Entry]] = {
    "FrontMatterParser": refused(
        "not available: honing reads the front matter as PageResponse (true)", "use_page_response_class"
    ),  # fmt: skip
    "PDFRenderer": honoured("data.pdf_longest_side", "target_longest_image_dim"),
    "StaticLengthDocumentAnchoring": honoured("data.pdf_pages.anchor_text_len", "target_anchor_text_len"),
    "InstructUserMessages": honoured("data.pdf_pages.prompt_first", "prompt_first"),
    "TableTransformation": honoured("data.pdf_pages.tables (annotate_dims, firstrowpreview)", "transformation"),
    "Tokenizer": {
        **refused("not available: honing leaves tokens out of the loss with -100", "masking_index"),
        **moot(
            "not needed: the reply ends as the model's chat template ends an assistant turn", "end_of_message_token"
        ),  # fmt: skip
    },
    "RandomTokenFlipper": {
        **honoured("data.pdf_pages.token_flip_rate", "token_flip_rate"),
        **refused("not available: honing leaves tokens out of the loss with -100", "masking_index"),
    },
    "RotationAugmentation": honoured("data.pdf_pages.rotation_probability", "probability"),
    "AugraphyBasicAugmentations": honoured("data.image_transforms.probability", "probability"),
}


def step_table(step: str) -> dict[str, Entry]:
    """One pipeline step's rows: its name (the step honing reads, or refuses), ``enabled``, and its settings."""
    if step in STEP_OPTIONS:
        rows = honoured(STEP_OPTIONS[step], "name")
    else:
        rows = refused(f"not available: the {step} step is not built in honing's olmOCR reader", "name")
    rows.update(honoured("the step skipped (false)", "enabled"))
    rows.update(STEP_KEYS.get(step, {}))
    return rows


STEPS = list(STEP_OPTIONS)
TABLE: dict[str, dict[str, Entry]] = {
    "": TOP,
    "model": MODEL,
    "dataset": DATASET,
    "dataset.<split>[]": ENTRY,
    "training": TRAINING,
    **{f"pipeline[{step}]": step_table(step) for step in STEPS},
}
