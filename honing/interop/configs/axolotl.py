"""axolotl's YAML configs (``base_model``, ``datasets``, ``sequence_len``, ``micro_batch_size``, ...) as honing's
config, key by key through ``axolotl_table``: the honoured keys are read here (the data sets in ``axolotl_data``),
then every other key is noted as moot or refused with its reason. Where the file says nothing, axolotl's defaults
(and the transformers Trainer's it passes on) are written where honing's own differ."""

from __future__ import annotations

from typing import Any

from honing.config.model_schema import LOAD_KWARGS_REFUSED
from honing.interop.configs.axolotl_data import translate_datasets, translate_pretraining, translate_template
from honing.interop.configs.axolotl_methods import translate_method_keys
from honing.interop.configs.axolotl_table import TABLE
from honing.interop.configs.axolotl_tokens import translate_tokens
from honing.interop.configs.axolotl_unasked import note_unasked
from honing.interop.configs.hf_args import (
    duration,
    eval_strategy_of,
    set_optimizer,
    set_schedule_defaults,
    set_warmup,
    step_interval,
    translate_lr_schedule,
    translate_neftune,
    translate_optimizer_numbers,
)
from honing.interop.configs.hf_engines import (
    lora_numbers,
    lora_targets,
    set_fp16,
    translate_deepspeed_file,
    translate_fsdp_config,
)
from honing.interop.configs.hub_args import translate_hub
from honing.interop.configs.key_tables import key_table
from honing.interop.configs.machine_options import set_attention
from honing.interop.configs.schema_table import finish
from honing.interop.configs.translation import Keys, Translation
from honing.interop.configs.trl_grpo_batch import (
    TRL_NUM_GENERATIONS,
    steps_as_rollout_batches,
    translate_trl_grpo_batch,
)

SOURCE, KEYS = key_table("axolotl")

SCHEMA = f"axolotl ({SOURCE})"
# rl -> honing's method (and the section its beta goes to)
RL_METHODS = {"dpo": "dpo", "ipo": "dpo", "kto": "kto", "orpo": "orpo", "simpo": "cpo", "grpo": "grpo"}
# axolotl's attention switches -> transformers' attn_implementation
ATTENTION = {
    "flash_attention": "flash_attention_2",
    "sdp_attention": "sdpa",
    "flex_attention": "flex_attention",
    "eager_attention": "eager",
}
# plugins whose keys are kernels of the same maths (their keys are in the table's plugins group)
KERNEL_PLUGINS = ("liger", "cut_cross_entropy")


def is_axolotl(raw: dict[str, Any]) -> bool:
    """An axolotl config: ``base_model`` with axolotl's ``datasets`` / ``sequence_len`` / ``micro_batch_size``."""
    return "base_model" in raw and any(
        key in raw for key in ("datasets", "pretraining_dataset", "sequence_len", "micro_batch_size", "num_epochs")
    )


def translate_axolotl(raw: dict[str, Any], config_path: str | None = None) -> Translation:
    """honing's config for an axolotl config, with refusals, notes and axolotl's defaults filled in."""
    t = Translation("axolotl")
    top = t.section(raw, "")
    method = choose_method(t, top)
    t.set("method", method)
    fill_defaults(t, method)
    translate_model(t, top)
    translate_lora(t, top)
    if method == "pretrain":
        translate_pretraining(t, top)
    translate_datasets(t, top, method)
    updates = translate_data_keys(t, top, method)
    translate_schedule(t, top)
    translate_method_keys(t, top, method)
    translate_engine(t, top, config_path)
    translate_outputs(t, top)
    if updates > 1:  # after every step count is written: TRL's count optimizer steps, honing's rollout batches
        steps_as_rollout_batches(t, updates, "", "trl.num_iterations")
    translate_plugins(t, top)
    note_unasked(t, top)
    finish(top, TABLE[""], KEYS[""], SCHEMA)
    return t


def choose_method(t: Translation, top: Keys) -> str:
    """``rl`` / ``reward_model`` / ``pretraining_dataset`` as honing's method; SFT otherwise."""
    rl = top.take("rl")
    if top.take("reward_model"):
        return "reward"
    if rl is not None and rl is not False:
        name = str(rl).lower()
        if name not in RL_METHODS:
            t.refuse("rl", f"{rl!r} is not available; expected one of: {', '.join(RL_METHODS)}")
            return "dpo"
        if name == "ipo":
            t.set("dpo.loss_type", "ipo")
        if name == "simpo":
            t.set("cpo.loss_type", "simpo")
        return RL_METHODS[name]
    return "pretrain" if top.has("pretraining_dataset") else "sft"


def fill_defaults(t: Translation, method: str) -> None:
    """axolotl's defaults where honing's differ (its schema's, and the transformers Trainer's it hands on)."""
    whose = "axolotl's"
    t.default("data.seq_len", 512, f"{whose} sequence_len")
    t.default("trainer.max_duration", "1epochs", f"{whose} num_epochs")
    t.default("trainer.save_folder", "./model-out", f"{whose} output_dir")
    t.default("optim.weight_decay", 0.0, f"{whose} weight_decay")
    t.default("optim.betas", [0.9, 0.999], "transformers' TrainingArguments.adam_beta1 / adam_beta2")
    set_schedule_defaults(t, "cosine", f"{whose} lr_scheduler")
    t.default("trainer.seed", 42, "transformers' TrainingArguments.seed")
    if method in ("sft", "vl_sft"):
        t.default("data.packing", False, f"{whose} sample_packing")


def translate_model(t: Translation, top: Keys) -> None:
    """The model, its tokenizer, weights and special tokens."""
    base = top.take("base_model")
    if not isinstance(base, str):
        t.refuse("base_model", "required: a Hugging Face model name or folder")
    else:
        t.set("model.name_or_path", base)
    tokenizer = top.take("tokenizer_config")
    if tokenizer is not None and tokenizer != base:
        t.set("tokenizer.kind", "pretrained")
        t.set("tokenizer.path", str(tokenizer))
    top.copy("trust_remote_code", "model.trust_remote_code", bool)
    translate_model_kwargs(t, top)
    if top.take("reinit_weights"):
        t.set("model.pretrained_weights", False)
    translate_tokens(t, top)


def translate_model_kwargs(t: Translation, top: Keys) -> None:
    """``model_config`` (axolotl's overrides of the model's config) and ``rope_scaling`` as ``model.config_overrides``;
    ``model_kwargs`` (handed to ``from_pretrained``) as ``model.load_kwargs``, but for arguments honing sets itself."""
    for name, path in (("model_config", "model.config_overrides"), ("model_kwargs", "model.load_kwargs")):
        values = top.take(name)
        if values is not None and not isinstance(values, dict):
            t.refuse(name, f"{values!r}: expected a mapping of keys")
            continue
        for key, value in (values or {}).items():
            if path == "model.load_kwargs" and key in LOAD_KWARGS_REFUSED:
                t.refuse(f"{name}.{key}", f"not passed through; {LOAD_KWARGS_REFUSED[key]}")
            else:
                t.set(f"{path}.{key}", value)
    rope = top.take("rope_scaling")
    if rope is not None:
        t.set("model.config_overrides.rope_scaling", rope)


def translate_lora(t: Translation, top: Keys) -> None:
    """``adapter: lora / qlora`` with its keys as ``model.lora``; 4 / 8-bit loading as ``model.quantize``."""
    adapter = top.take("adapter")
    four, eight = bool(top.take("load_in_4bit")), bool(top.take("load_in_8bit"))
    lora_keys = ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "lora_target_linear",
                 "lora_modules_to_save", "peft")  # fmt: skip
    if adapter is None:
        for name in lora_keys:
            top.note(name, "unused: no adapter is set, so every weight trains (as in axolotl)")
        if four or eight:
            t.refuse("load_in_4bit" if four else "load_in_8bit", "quantized full fine-tuning is not available")
        return
    if adapter not in ("lora", "qlora"):
        t.refuse("adapter", f"{adapter!r} is not available; honing's adapters are lora and qlora")
        return
    lora = lora_numbers(top)
    linear, modules = top.take("lora_target_linear"), top.take("lora_target_modules")
    targets = "all-linear" if linear else lora_targets(modules)
    if targets is not None:
        lora["target_modules"] = targets
    saved = top.names("lora_modules_to_save")
    if saved:
        lora["modules_to_save"] = saved
    top.refuse("peft", "not available: LoftQ initialisation (honing's adapters start as peft's default)")
    t.set("model.lora", lora)
    if "alpha" not in lora:
        t.default("model.lora.alpha", 8.0, "peft's LoraConfig.lora_alpha")
    if "target_modules" not in lora:
        t.default("model.lora.target_modules", ["q_proj", "v_proj"], "peft's default for Llama / Qwen models")
    if adapter == "qlora" or four:
        t.set("model.quantize", "nf4")
    elif eight:
        t.set("model.quantize", "int8")


def translate_data_keys(t: Translation, top: Keys, method: str) -> int:
    """Length, packing, masking, template, validation share and the batch."""
    top.copy("sequence_len", "data.seq_len", int)
    if method in ("sft", "vl_sft"):
        top.copy("sample_packing", "data.packing", bool)
        if top.take("train_on_inputs"):
            t.set("data.train_on", "all")
    elif method == "pretrain":
        top.note("sample_packing", "pretraining rows are always cut from one stream of documents")
    else:
        top.refuse("sample_packing", f"not available for method {method!r}")
    if method not in ("sft", "vl_sft"):
        top.note("train_on_inputs", f"unused by method {method!r} (its labels are the completions)")
    strategy = top.take("excess_length_strategy")
    if strategy is not None:
        if str(strategy) in ("drop", "truncate"):
            t.set("data.overlong", str(strategy))
        else:
            t.refuse("excess_length_strategy", f"{strategy!r} is not available; expected drop or truncate")
    translate_template(t, top.take("chat_template"), top.take("chat_template_jinja"), "chat_template")
    size = top.number("val_set_size", float)
    if size:
        if size >= 1:
            t.refuse("val_set_size", f"{size!r} rows: honing holds out a fraction of the rows (give 0 < share < 1)")
        elif not top.has("test_datasets"):
            t.set("data.validation_split", size)
    if method != "pretrain":
        top.copy("group_by_length", "data.group_by_length", bool)
    elif top.take("group_by_length"):
        t.note("group_by_length", "unused: pretraining rows all have data.seq_len tokens")
    top.copy("dataloader_num_workers", "data.num_workers", int)
    micro = top.number("micro_batch_size", int, 1)
    accumulation = top.number("gradient_accumulation_steps", int, 1)
    total = top.number("batch_size", int)
    if total is not None and not top.has("gradient_accumulation_steps"):
        accumulation = max(total // micro, 1)  # axolotl's batch_size: rows per step on one device
    given = any(top.has(name) for name in ("micro_batch_size", "gradient_accumulation_steps", "batch_size"))
    top.copy("eval_batch_size", "callbacks.evaluator.batch_size", int)
    if method == "grpo":  # TRL's GRPO batch counts completions per device: prompts per rank and generations
        return grpo_batch(t, top.peek("trl"), micro, accumulation, given)
    write = t.set if given else lambda path, value: t.default(path, value, "axolotl's micro_batch_size: 1")
    write("data.micro_batch_size", micro)
    write("data.batch_size_per_rank", micro * accumulation)  # per device, as the Trainer reads them
    return 1


def grpo_batch(t: Translation, trl: Any, micro: int, accumulation: int, given: bool) -> int:
    """``micro_batch_size`` x ``gradient_accumulation_steps`` completions as TRL's GRPOTrainer reads them
    (``trl_grpo_batch``): the optimizer steps of one honing step."""
    trl = trl if isinstance(trl, dict) else {}
    generations, iterations = trl.get("num_generations") or TRL_NUM_GENERATIONS, trl.get("num_iterations") or 1
    if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in (generations, iterations)):
        return 1  # refused where the trl section is read, or by honing's bounds
    keys = {
        "per_device": "micro_batch_size",
        "accumulation": "gradient_accumulation_steps",
        "generations": "trl.num_generations",
        "steps_per_generation": "gradient_accumulation_steps",
    }
    whose = "axolotl's micro_batch_size: 1 / TRL's num_generations"
    return translate_trl_grpo_batch(
        t,
        keys,
        given=given,
        whose=whose,
        per_device=micro,
        accumulation=accumulation,
        generations=generations,
        num_iterations=iterations,
    )


def translate_schedule(t: Translation, top: Keys) -> None:
    """Duration, optimizer, learning rate and its schedule."""
    duration(t, "max_steps", top.take("max_steps"), "num_epochs", top.take("num_epochs"))
    if top.has("optimizer"):
        set_optimizer(t, "optimizer", str(top.peek("optimizer")))
    top.take("optimizer")
    if not top.has("learning_rate"):
        t.refuse("learning_rate", "required by axolotl's schema; give the learning rate")
    translate_optimizer_numbers(t, top)
    name = translate_lr_schedule(t, top, "lr_scheduler")
    ratio = top.number("cosine_min_lr_ratio", float)
    if ratio is not None:
        # axolotl's own cosine with a floor is transformers' cosine_with_min_lr, operation for operation
        if t.get("scheduler.name") == "cosine":
            t.set("scheduler.name", "cosine_with_min_lr")
            t.set("scheduler.kwargs.min_lr_rate", ratio)
        else:
            t.refuse("cosine_min_lr_ratio", f"read by axolotl with lr_scheduler: cosine only, not {name!r}")
    set_warmup(t, "warmup_steps", top.take("warmup_steps"), "warmup_ratio", top.take("warmup_ratio"))
    embedding_lr, scale = top.number("embedding_lr", float), top.number("embedding_lr_scale", float)
    lr = t.get("optim.lr")
    if (embedding_lr or scale) and lr is not None:
        group_lr = embedding_lr if embedding_lr else lr * scale
        t.set("optim.param_groups", [{"params": "*embed_tokens*", "lr": group_lr}])
    translate_neftune(t, top)


def translate_engine(t: Translation, top: Keys, config_path: str | None) -> None:
    """Precision, attention, activation checkpointing, compile and parallelism."""
    bf16 = top.take("bf16", "auto")
    bfloat16 = top.take("bfloat16")
    if bf16 is True or bfloat16:
        t.set("trainer.precision", "bf16-mixed")
    elif bf16 == "auto":
        t.note("bf16", "'auto': bf16-mixed where the GPU has bf16 (axolotl's default); honing trains in "
                       "trainer.precision (fp32 unless set)")  # fmt: skip
    if top.take("fp16") or top.take("float16"):
        set_fp16(t, "fp16")
    if top.take("float32"):
        t.set("trainer.precision", "fp32")
    chosen = [name for name in ATTENTION if top.take(name)]
    implementation = top.take("attn_implementation")
    if implementation is not None:
        set_attention(t, "attn_implementation", str(implementation))
    elif chosen:
        set_attention(t, chosen[0], ATTENTION[chosen[0]])
    if top.take("gradient_checkpointing"):
        t.set("parallel.activation_checkpointing", "full")
    kwargs = t.section(top.take("gradient_checkpointing_kwargs"), "gradient_checkpointing_kwargs")
    kwargs.note("use_reentrant", "not needed: honing's activation checkpointing is always non-reentrant")
    kwargs.done("honing checkpoints whole blocks, non-reentrant")
    if top.take("activation_offloading"):
        t.set("parallel.activation_offload", True)
    top.copy("torch_compile", "parallel.compile", bool)
    deepspeed = top.take("deepspeed")
    if deepspeed is not None:
        translate_deepspeed_file(t, "deepspeed", deepspeed, config_path)
    fsdp, fsdp_config = top.take("fsdp"), top.take("fsdp_config")
    top.take("fsdp_version")
    top.take("fsdp_final_state_dict_type")
    if fsdp or fsdp_config:
        translate_fsdp_config(t, "fsdp_config", fsdp_config or {})
    for name, path in (("dp_shard_size", "parallel.dp_shard"), ("dp_replicate_size", "parallel.dp_replicate"),
                       ("context_parallel_size", "parallel.cp"), ("sequence_parallel_degree", "parallel.cp"),
                       ("tensor_parallel_size", "parallel.tp")):  # fmt: skip
        top.copy(name, path, int)
    timeout = top.number("ddp_timeout", float)
    if timeout is not None:
        t.set("parallel.timeout_seconds", timeout)


def translate_outputs(t: Translation, top: Keys) -> None:
    """Save folder, seed, resuming, checkpoints, evaluation, logging and trackers."""
    top.copy("output_dir", "trainer.save_folder", str)
    top.copy("seed", "trainer.seed", int)
    resume = top.take("resume_from_checkpoint")
    if resume:
        t.set("trainer.load_path", str(resume))
        t.set("trainer.load_strategy", "always")
    auto = top.take("auto_resume_from_checkpoints")
    if not resume:
        t.set("trainer.load_strategy", "if_available" if auto else "never")
    save_steps = top.take("save_steps")  # below 1: a ratio of a run given in steps (refused in epochs)
    strategy = str(top.take("save_strategy") or "").lower()
    interval = step_interval(t, "save_steps", save_steps)
    if interval is not None:
        t.set("callbacks.checkpointer.save_interval", interval)
    per_epoch = top.number("saves_per_epoch", int)
    if per_epoch == 1 or strategy == "epoch":
        t.set("callbacks.checkpointer.save_at_epoch_end", True)
    elif per_epoch and save_steps is None:
        t.set("callbacks.checkpointer.save_at_epoch_end", True)
        why = "honing saves at each epoch's end and every callbacks.checkpointer.save_interval steps, not N times"
        t.note("saves_per_epoch", f"{per_epoch}: {why} per epoch (set the interval to the epoch's steps / N)")
    if strategy == "no":
        t.set("callbacks.checkpointer.save_interval", 10**9)
    top.copy("save_total_limit", "callbacks.checkpointer.keep_last", int)
    eval_steps = step_interval(t, "eval_steps", top.take("eval_steps"), "callbacks.evaluator.interval_fraction")
    if eval_steps is not None:
        t.set("callbacks.evaluator.interval", eval_steps)
    validation = t.get("data.validation") is not None or t.get("data.validation_split")
    per_epoch_evals = top.number("evals_per_epoch", int)
    if per_epoch_evals and validation and top.peek("load_best_model_at_end"):
        t.refuse("evals_per_epoch", "with load_best_model_at_end: honing picks the best of evaluations every N steps "
                                    "(eval_steps); give eval_steps")  # fmt: skip
    elif per_epoch_evals and validation and not top.has("eval_steps"):
        t.note("evals_per_epoch", f"{per_epoch_evals}: honing evaluates every callbacks.evaluator.interval steps, not "
                                  "per epoch (set it to the epoch's steps / N); the training is the same")  # fmt: skip
    elif per_epoch_evals:
        t.note("evals_per_epoch", "unused: no validation data, or eval_steps given (as in axolotl)")
    if eval_strategy_of(t, top, "").lower() == "no":
        t.set("callbacks.evaluator.enabled", False)
    interval = step_interval(t, "logging_steps", top.take("logging_steps"))
    if interval is not None:
        t.set("callbacks.console.log_interval", interval)
    top.copy("metric_for_best_model", "callbacks.evaluator.metric_for_best_model", str)
    top.copy("greater_is_better", "callbacks.evaluator.greater_is_better", bool)
    if top.take("load_best_model_at_end"):
        t.set("callbacks.evaluator.load_best_model_at_end", True)
    project = top.take("wandb_project")
    if top.take("use_wandb") or project:
        t.set("callbacks.wandb.enabled", True)
        if project:
            t.set("callbacks.wandb.project", str(project))
    top.copy("wandb_entity", "callbacks.wandb.entity", str)
    top.copy("wandb_name", "callbacks.wandb.name", str)
    mode = top.take("wandb_mode")
    if mode is not None:
        t.set("callbacks.wandb.mode", str(mode))
    top.copy("use_tensorboard", "callbacks.tensorboard.enabled", bool)
    steps = top.number("profiler_steps", int)
    start = top.number("profiler_steps_start", int, 0)
    if steps:
        t.set("callbacks.profiler", {"enabled": True, "start": start + 1, "stop": start + 1 + steps})
    threshold = top.number("loss_watchdog_threshold", float)
    patience = top.number("loss_watchdog_patience", int)
    if threshold is not None:  # axolotl adds its LossWatchDogCallback only with a threshold; patience defaults to 3
        t.set("callbacks.loss_watchdog.threshold", threshold)
        if patience:
            t.set("callbacks.loss_watchdog.patience", patience)
    elif patience is not None:
        t.note("loss_watchdog_patience", "unused without loss_watchdog_threshold (as in axolotl)")
    translate_hub(t, top, push=top.has("hub_model_id"))  # axolotl pushes when a repository is named


def translate_plugins(t: Translation, top: Keys) -> None:
    """``plugins``: the liger and cut-cross-entropy kernels are moot (their keys noted); any other is refused. The
    plugins' keys sit at the top level: those not in the core schema are walked in the plugins group."""
    plugins = top.names("plugins") or []
    for plugin in plugins:
        if not any(kernel in plugin for kernel in KERNEL_PLUGINS):
            t.refuse("plugins", f"{plugin!r}: not available (honing runs the liger and cut-cross-entropy "
                                "kernels' maths with its own chunked loss, and has no other plugins)")  # fmt: skip
    plugin_keys = {name: value for name, value in top.values.items() if name in KEYS["plugins"]}
    if plugin_keys:
        section = t.section(plugin_keys, "")
        finish(section, TABLE["plugins"], KEYS["plugins"], SCHEMA)
        top.taken.update(plugin_keys)
