"""LLaMA-Factory's training YAML (``model_name_or_path``, ``stage``, ``finetuning_type``, ``dataset``, ``template``,
``cutoff_len`` and transformers' ``TrainingArguments``, all in one flat mapping) as honing's config, key by key
through ``llamafactory_table``: the honoured keys are read here (the data sets, resolved through
``dataset_info.json``, in ``llamafactory_data``), then every other key is noted as moot or refused with its reason.
Where the file says nothing, LLaMA-Factory's and transformers' defaults are written where honing's differ."""

from __future__ import annotations

from honing.interop.configs import hf_args
from honing.interop.configs.hf_engines import lora_targets, set_fp16, translate_deepspeed_file, translate_fsdp_config
from honing.interop.configs.hf_training_extras import NON_REENTRANT, translate_training_extras
from honing.interop.configs.hub_args import translate_hub
from honing.interop.configs.key_tables import key_table
from honing.interop.configs.llamafactory_data import translate_data
from honing.interop.configs.llamafactory_table import TABLE
from honing.interop.configs.machine_options import set_attention
from honing.interop.configs.schema_table import Value, finish
from honing.interop.configs.translation import Keys, Translation

SOURCE, KEYS = key_table("llamafactory")

SCHEMA = f"LLaMA-Factory ({SOURCE})"
# the five dataclasses LLaMA-Factory's parser reads one training YAML into, as one namespace
TRAIN_GROUPS = ("ModelArguments", "DataArguments", "TrainingArguments", "FinetuningArguments", "GeneratingArguments",
                "Seq2SeqTrainingArguments")  # fmt: skip
TRAIN_KEYS: dict[str, tuple[str, str]] = {key: value for group in TRAIN_GROUPS for key, value in KEYS[group].items()}
STAGES = {"pt": "pretrain", "sft": "sft", "rm": "reward", "dpo": "dpo", "kto": "kto"}
# stage dpo's pref_loss -> (method, the section's loss_type)
PREF_LOSSES = {
    "sigmoid": ("dpo", None),
    "hinge": ("dpo", "hinge"),
    "ipo": ("dpo", "ipo"),
    "orpo": ("orpo", None),
    "simpo": ("cpo", "simpo"),
}
ATTENTION = {"disabled": "eager", "sdpa": "sdpa", "fa2": "flash_attention_2"}


def is_llamafactory(raw: dict[str, Value]) -> bool:
    """A LLaMA-Factory config: ``model_name_or_path`` with its ``stage`` / ``finetuning_type`` / ``dataset`` /
    ``template`` / ``cutoff_len``."""
    return "model_name_or_path" in raw and any(
        key in raw for key in ("stage", "finetuning_type", "dataset", "template", "cutoff_len")
    )


def translate_llamafactory(raw: dict[str, Value], config_path: str | None = None) -> Translation:
    """honing's config for a LLaMA-Factory training config, with refusals, notes and defaults filled in."""
    t = Translation("LLaMA-Factory")
    top = t.section(raw, "")
    t.set("method", choose_method(t, top))
    translate_data(t, top, t.get("method"), config_path)  # image rows make it vl_sft
    method = t.get("method")
    fill_defaults(t, method)
    translate_model(t, top, method)
    translate_adapters(t, top, method)
    translate_training(t, top)
    translate_engine(t, top, config_path)
    translate_outputs(t, top)
    finish(top, TABLE[""], TRAIN_KEYS, SCHEMA)
    return t


def choose_method(t: Translation, top: Keys) -> str:
    """``stage`` (and stage dpo's ``pref_loss``) as honing's method."""
    stage = str(top.take("stage", "sft"))
    loss = str(top.take("pref_loss", "sigmoid"))
    if stage == "ppo":
        t.refuse("stage", "'ppo' is not available: honing's online method is GRPO")
        return "sft"
    if stage not in STAGES:
        t.refuse("stage", f"{stage!r} is not available; expected one of: {', '.join(STAGES)}")
        return "sft"
    if stage != "dpo":
        return STAGES[stage]
    if loss not in PREF_LOSSES:
        t.refuse("pref_loss", f"{loss!r} is not available; expected one of: {', '.join(PREF_LOSSES)}")
        return "dpo"
    method, loss_type = PREF_LOSSES[loss]
    if loss_type is not None:
        t.set(f"{method}.loss_type", loss_type)
    return method


def fill_defaults(t: Translation, method: str) -> None:
    """LLaMA-Factory's and transformers' defaults where honing's differ."""
    lf, hf = "LLaMA-Factory's", "transformers' TrainingArguments."
    t.default("data.seq_len", 2048, f"{lf} cutoff_len")
    t.default("data.micro_batch_size", 8, f"{hf}per_device_train_batch_size")
    t.default("data.batch_size_per_rank", 8, f"{hf}per_device_train_batch_size x gradient_accumulation_steps")
    t.default("trainer.max_duration", "3epochs", f"{hf}num_train_epochs")
    t.default("optim.lr", 5e-5, f"{hf}learning_rate")
    t.default("optim.weight_decay", 0.0, f"{hf}weight_decay")
    t.default("optim.betas", [0.9, 0.999], f"{hf}adam_beta1 / adam_beta2")
    hf_args.set_schedule_defaults(t, "linear", f"{hf}lr_scheduler_type")
    t.default("trainer.seed", 42, f"{hf}seed")
    t.default("callbacks.checkpointer.save_interval", 500, f"{hf}save_steps")
    t.default("callbacks.console.log_interval", 500, f"{hf}logging_steps")
    t.default("parallel.activation_checkpointing", "full", f"{lf} gradient checkpointing (on unless disabled)")
    if method in ("sft", "vl_sft"):
        t.default("data.packing", False, f"{lf} packing (off but for stage pt)")
    if method == "cpo":
        t.default("cpo.cpo_alpha", 0.0, f"{lf} pref_ftx (SimPO without an SFT term)")


def translate_model(t: Translation, top: Keys, method: str) -> None:
    """The model, its weights, attention, quantization and dtype."""
    name = top.take("model_name_or_path")
    if not isinstance(name, str):
        t.refuse("model_name_or_path", "required: a Hugging Face model name or folder")
    else:
        t.set("model.name_or_path", name)
    top.copy("trust_remote_code", "model.trust_remote_code", bool)
    if top.take("train_from_scratch"):
        t.set("model.pretrained_weights", False)
    attention = str(top.take("flash_attn", "auto"))
    if attention in ATTENTION:
        set_attention(t, "flash_attn", ATTENTION[attention])
    elif attention != "auto":
        t.refuse("flash_attn", f"{attention!r} is not available; expected auto, disabled, sdpa or fa2")
    top.copy("moe_aux_loss_coef", "model.router_aux_loss_coef", float)
    if top.take("disable_gradient_checkpointing"):
        t.set("parallel.activation_checkpointing", "none")
    bits = top.number("quantization_bit", int)
    quant_method = str(top.take("quantization_method", "bnb"))
    kind, double = str(top.take("quantization_type", "nf4")), top.take("double_quantization", True)
    if bits is not None:
        if quant_method not in ("bnb", "bitsandbytes"):
            t.refuse("quantization_method", f"{quant_method!r}: honing quantizes on the fly (NF4 / int8, torchao)")
        elif bits == 8:
            t.set("model.quantize", "int8")
        elif bits == 4 and kind in ("nf4", "fp4"):
            t.set("model.quantize", kind)
            if double is False:
                t.note("double_quantization", "false: honing's 4-bit weights always quantize their scales (torchao)")
        else:
            t.refuse("quantization_bit", f"{bits} ({kind}) is not available: honing quantizes to nf4, fp4 or int8")
    if method == "vl_sft":
        for name_, path, default in (("image_max_pixels", "data.max_pixels", 768 * 768),
                                     ("image_min_pixels", "data.min_pixels", 32 * 32)):  # fmt: skip
            value = top.number(name_, int)
            if value is not None:
                t.set(path, value)
            else:
                t.default(path, default, f"LLaMA-Factory's {name_}")
        if not top.take("freeze_vision_tower", True):
            t.set("model.freeze_vision", False)
        if top.take("freeze_multi_modal_projector", True):
            t.set("model.freeze_projector", True)
    else:
        for name_ in ("image_max_pixels", "image_min_pixels", "freeze_vision_tower", "freeze_multi_modal_projector"):
            top.take(name_)  # LLaMA-Factory's image settings; no images in a text run


def translate_adapters(t: Translation, top: Keys, method: str) -> None:
    """``finetuning_type`` (LoRA by default) with its keys as ``model.lora``; full fine-tuning; the method's keys."""
    kind = str(top.take("finetuning_type", "lora"))
    rank = top.number("lora_rank", int, 8)
    alpha = top.number("lora_alpha", float)
    dropout = top.number("lora_dropout", float, 0.0)
    targets = lora_targets(top.take("lora_target", "all"))
    extra = lora_targets(top.take("additional_target"))
    if kind == "lora":
        lora: dict[str, Value] = {"rank": rank, "alpha": alpha if alpha is not None else rank * 2.0, "dropout": dropout}
        lora["target_modules"] = targets or "all-linear"
        if isinstance(extra, list):
            lora["modules_to_save"] = extra
        if method == "reward":
            lora["task_type"] = "SEQ_CLS"
        t.set("model.lora", lora)
    elif kind == "full":
        if method == "vl_sft":
            t.set("model.lora", None)  # honing's default for images is LoRA
    else:
        t.refuse("finetuning_type", f"{kind!r} is not available: honing trains LoRA adapters or every weight")
    beta = top.number("pref_beta", float)
    if beta is not None and method in ("dpo", "orpo", "cpo", "kto"):
        t.set(f"{method}.beta", beta)
    elif method in ("dpo", "orpo", "cpo", "kto"):
        t.default(f"{method}.beta", 0.1, "LLaMA-Factory's pref_beta")
    ftx = top.number("pref_ftx", float)
    if ftx:
        if method == "dpo":
            t.set("dpo.rpo_alpha", ftx)
        elif method == "cpo":
            t.set("cpo.cpo_alpha", ftx)
        else:
            t.refuse("pref_ftx", f"not available for method {method!r}")
    for name, path, methods in (("dpo_label_smoothing", "dpo.label_smoothing", ("dpo",)),
                                ("simpo_gamma", "cpo.simpo_gamma", ("cpo",)),
                                ("kto_chosen_weight", "kto.desirable_weight", ("kto",)),
                                ("kto_rejected_weight", "kto.undesirable_weight", ("kto",))):  # fmt: skip
        value = top.number(name, float)
        if value is not None and method in methods:
            t.set(path, value)
    ld_alpha = top.number("ld_alpha", float)
    if ld_alpha is not None and method == "dpo":
        t.set("dpo.ld_alpha", ld_alpha)
    elif ld_alpha is not None:
        t.refuse("ld_alpha", f"unused by method {method!r}: honing's LD-DPO weighting is DPO's (dpo.ld_alpha)")
    if method == "cpo" and not top.has("simpo_gamma"):
        t.default("cpo.simpo_gamma", 0.5, "LLaMA-Factory's simpo_gamma")
    if top.take("use_muon"):
        t.set("optim.name", "muon")
    if top.take("pure_bf16"):
        t.set("trainer.precision", "bf16")
    size = top.number("hyper_parallel_cp_size", int, 1)
    if size > 1:
        t.set("parallel.cp", size)


def translate_training(t: Translation, top: Keys) -> None:
    """The batch, duration, optimizer and schedule (transformers' TrainingArguments)."""
    given = top.has("per_device_train_batch_size") or top.has("gradient_accumulation_steps")
    per_device = top.number("per_device_train_batch_size", int, 8)
    accumulation = top.number("gradient_accumulation_steps", int, 1)
    if given:
        t.set("data.micro_batch_size", per_device)
        t.set("data.batch_size_per_rank", per_device * accumulation)  # per device, as the Trainer reads them
    hf_args.duration(t, "max_steps", top.take("max_steps"), "num_train_epochs", top.take("num_train_epochs"))
    if top.has("optim"):
        hf_args.set_optimizer(t, "optim", str(top.peek("optim")))
    top.take("optim")
    hf_args.translate_optimizer_numbers(t, top)
    hf_args.translate_lr_schedule(t, top, "lr_scheduler_type")
    hf_args.set_warmup(t, "warmup_steps", top.take("warmup_steps"), "warmup_ratio", top.take("warmup_ratio"))
    hf_args.translate_neftune(t, top)


def translate_engine(t: Translation, top: Keys, config_path: str | None) -> None:
    """Precision, activation checkpointing, compile, DeepSpeed / FSDP, the device."""
    if top.take("bf16"):
        t.set("trainer.precision", "bf16-mixed")
    if top.take("fp16"):
        set_fp16(t, "fp16")
    if top.take("gradient_checkpointing"):
        t.set("parallel.activation_checkpointing", "full")
    top.note("use_reentrant_gc", NON_REENTRANT)
    top.copy("torch_compile", "parallel.compile", bool)
    translate_training_extras(t, top)
    deepspeed = top.take("deepspeed")
    if deepspeed is not None:
        translate_deepspeed_file(t, "deepspeed", deepspeed, config_path)
    fsdp, fsdp_config = top.take("fsdp"), top.take("fsdp_config")
    if fsdp:
        options = fsdp.split() if isinstance(fsdp, str) else [str(option) for option in fsdp]
        config = dict(fsdp_config) if isinstance(fsdp_config, dict) else {}
        if "offload" in options:
            config["offload_params"] = True
        if "shard_grad_op" in options:
            config["sharding_strategy"] = "SHARD_GRAD_OP"
        if "no_shard" in options:
            config["sharding_strategy"] = "NO_SHARD"
        translate_fsdp_config(t, "fsdp_config", config)
    elif fsdp_config:
        t.note("fsdp_config", "unused without fsdp (as in transformers)")
    timeout = top.number("ddp_timeout", float)
    if timeout is not None:
        t.set("parallel.timeout_seconds", timeout)
    if top.take("use_cpu"):
        t.set("trainer.device", "cpu")


def translate_outputs(t: Translation, top: Keys) -> None:
    """Save folder, seed, resuming, checkpoints, evaluation, logging, trackers and the profiler."""
    top.copy("output_dir", "trainer.save_folder", str)
    top.copy("seed", "trainer.seed", int)
    data_seed = top.take("data_seed")
    if data_seed is not None and data_seed != t.get("trainer.seed"):
        t.refuse("data_seed", "not available: honing's data order and initialisation follow one seed (seed)")
    resume = top.take("resume_from_checkpoint")
    if resume:
        t.set("trainer.load_path", str(resume))
        t.set("trainer.load_strategy", "always")
    if top.take("overwrite_output_dir") and not resume:
        # LLaMA-Factory resumes from output_dir's last checkpoint unless told to overwrite it
        t.set("trainer.load_strategy", "never")
        t.set("trainer.save_overwrite", True)
    strategy = str(top.take("save_strategy", "steps")).lower()
    save_steps = top.take("save_steps")
    if strategy == "no":
        t.set("callbacks.checkpointer.save_interval", 10**9)
    elif strategy == "epoch":
        t.set("callbacks.checkpointer.save_at_epoch_end", True)
        t.set("callbacks.checkpointer.save_interval", 10**9)
    elif (interval := hf_args.step_interval(t, "save_steps", save_steps)) is not None:
        t.set("callbacks.checkpointer.save_interval", interval)
    top.copy("save_total_limit", "callbacks.checkpointer.keep_last", int)
    eval_strategy = hf_args.eval_strategy_of(t, top, "no").lower()
    eval_steps = top.take("eval_steps")
    if eval_strategy == "steps":
        # transformers: eval_steps defaults to logging_steps (a ratio of the run in either)
        interval = hf_args.step_interval(t, "eval_steps" if eval_steps is not None else "logging_steps",
                                 eval_steps if eval_steps is not None else top.peek("logging_steps", 500),
                                 "callbacks.evaluator.interval_fraction")  # fmt: skip
        if interval is not None:
            t.set("callbacks.evaluator.interval", interval)
    elif eval_strategy == "no":
        if t.get("data.validation") is not None or t.get("data.validation_split"):
            t.set("callbacks.evaluator.enabled", False)
    elif eval_strategy == "epoch":  # at each epoch's last step, as transformers' Trainer
        t.set("callbacks.evaluator.every_epoch", True)
        if eval_steps is not None:
            t.note("eval_steps", "not used: eval_strategy is 'epoch' (callbacks.evaluator.every_epoch)")
    else:
        t.refuse("eval_strategy", f"{eval_strategy!r} is not available: honing evaluates every N steps or every epoch")
    top.copy("per_device_eval_batch_size", "callbacks.evaluator.batch_size", int)
    top.copy("metric_for_best_model", "callbacks.evaluator.metric_for_best_model", str)
    top.copy("greater_is_better", "callbacks.evaluator.greater_is_better", bool)
    if top.take("load_best_model_at_end"):
        t.set("callbacks.evaluator.load_best_model_at_end", True)
    hf_args.read_logging_strategy(t, "logging_strategy", top.take("logging_strategy"))
    interval = hf_args.step_interval(t, "logging_steps", top.take("logging_steps"))
    if interval is not None:
        t.set("callbacks.console.log_interval", interval)
    translate_trackers(t, top)
    sampling = str(top.take("train_sampling_strategy", "random"))
    if sampling == "group_by_length":
        t.set("data.group_by_length", True)
    elif sampling == "sequential":
        t.set("data.shuffle", False)
    if top.take("enable_torch_profiler"):
        start = top.number("profiler_wait_steps", int, 1) + top.number("profiler_warmup_steps", int, 1) + 1
        t.set("callbacks.profiler", {"enabled": True, "start": start,
                                     "stop": start + top.number("profiler_active_steps", int, 1)})  # fmt: skip
    for name in ("profiler_wait_steps", "profiler_warmup_steps", "profiler_active_steps"):
        top.take(name)
    translate_hub(t, top, push=bool(top.take("push_to_hub")))


def translate_trackers(t: Translation, top: Keys) -> None:
    """``report_to`` (wandb, tensorboard; none), ``run_name``, ``project``."""
    report = top.take("report_to", "none")
    names = [report] if isinstance(report, str) else [str(name) for name in report or []]
    for name in names:
        if name == "wandb":
            t.set("callbacks.wandb.enabled", True)
        elif name == "tensorboard":
            t.set("callbacks.tensorboard.enabled", True)
        elif name == "all":
            t.set("callbacks.wandb.enabled", True)
            t.set("callbacks.tensorboard.enabled", True)
        elif name != "none":
            t.refuse("report_to", f"{name!r} is not available: honing logs to wandb, tensorboard and metrics.jsonl")
    top.copy("run_name", "run_name", str)
    project = top.take("project")
    if project is not None and project != "huggingface" and t.get("callbacks.wandb.enabled"):
        t.set("callbacks.wandb.project", str(project))
