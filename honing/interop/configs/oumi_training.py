"""Oumi's ``training`` and ``peft`` sections as honing's trainer, optimizer, schedule, callbacks, LoRA and GRPO keys;
``VERL_GRPO``'s ``verl_config_overrides`` through the table in ``honing.interop.configs.verl``."""

from __future__ import annotations

from typing import Any

from honing.interop.configs.hf_args import duration, set_optimizer, set_schedule, set_warmup
from honing.interop.configs.translation import Keys, Translation
from honing.interop.configs.verl import translate_verl_overrides

# TRL's GRPOConfig default: completions per prompt
TRL_NUM_GENERATIONS = 8
# verl's default data.train_batch_size (prompts per step), used by VERL_GRPO when the overrides do not set it
VERL_TRAIN_BATCH_SIZE = 1024
# peft's default LoRA targets for Llama / Qwen / Mistral models (Oumi passes lora_target_modules: null to peft)
PEFT_DEFAULT_TARGETS = ["q_proj", "v_proj"]


def translate_training(t: Translation, training: Keys, *, method: str, verl: bool) -> None:
    """``training.*``: duration, batch, optimizer, schedule, checkpoints, evaluation, logging, GRPO."""
    training.copy("output_dir", "trainer.save_folder")
    training.copy("run_name", "run_name")
    duration(
        t,
        "training.max_steps",
        training.take("max_steps"),
        "training.num_train_epochs",
        training.take("num_train_epochs"),
    )
    per_device = int(training.take("per_device_train_batch_size", 8))
    accumulation = int(training.take("gradient_accumulation_steps", 1))
    if method == "grpo":
        grpo_batch(t, training, per_device * accumulation, verl)
    else:
        t.set("data.micro_batch_size", per_device)
        t.set("data.global_batch_size", per_device * accumulation)
        t.note(
            "training.per_device_train_batch_size",
            "times gradient_accumulation_steps is data.global_batch_size, "
            "in honing the batch of all processes together (under torchrun, multiply it by their number)",
        )
    training.copy("per_device_eval_batch_size", "callbacks.evaluator.batch_size", int)
    training.copy("learning_rate", "optim.lr", float)
    training.copy("weight_decay", "optim.weight_decay", float)
    betas = [float(training.take("adam_beta1", 0.9)), float(training.take("adam_beta2", 0.999))]
    t.set("optim.betas", betas)
    training.copy("adam_epsilon", "optim.eps", float)
    if "max_grad_norm" in training.values:
        norm = training.take("max_grad_norm")
        t.set("optim.grad_clip", float(norm) if norm else None)
    if training.has("optimizer"):
        set_optimizer(t, training.key("optimizer"), str(training.take("optimizer")))
    training.take("optimizer")
    if training.has("lr_scheduler_type"):
        set_schedule(
            t,
            "training.lr_scheduler_type",
            str(training.take("lr_scheduler_type")),
            training.take("lr_scheduler_kwargs"),
        )
    else:
        training.refuse("lr_scheduler_kwargs", "given without training.lr_scheduler_type")
    training.take("lr_scheduler_type")
    set_warmup(
        t,
        "training.warmup_steps",
        training.take("warmup_steps"),
        "training.warmup_ratio",
        training.take("warmup_ratio"),
    )
    training.copy("seed", "trainer.seed", int)
    if training.has("data_seed") and training.peek("data_seed") != t.get("trainer.seed"):
        training.refuse(
            "data_seed", "not available: honing's data order and initialisation follow one seed (training.seed)"
        )
    training.take("data_seed")
    translate_checkpoints(t, training)
    translate_eval_and_logging(t, training, method)
    translate_grpo(t, t.section(training.take("grpo"), "training.grpo"), method=method, verl=verl)
    rewards = training.take("reward_functions")
    if rewards is not None:
        if method != "grpo":
            t.refuse("training.reward_functions", f"used by GRPO trainers only, not {method!r}")
        else:
            names = [rewards] if isinstance(rewards, str) else list(rewards)
            # verl's reward signature (data_source, solution_str, ground_truth, extra_info): honing.rl.verl
            t.set("grpo.rewards", [{"name": f"verl:{name}" if verl else name} for name in names])
    if verl:
        translate_verl_overrides(t, t.section(training.take("verl_config_overrides"), "training.verl_config_overrides"))
    else:
        training.refuse("verl_config_overrides", "used by trainer_type VERL_GRPO only")
    training.take("use_peft")  # read with the peft section
    if training.peek("trainer_kwargs"):
        training.refuse("trainer_kwargs", "not translated: give honing's own keys")
    training.take("trainer_kwargs")
    if training.peek("dataloader_num_workers") == "auto":  # Oumi: as many as the machine suits; honing's default
        training.take("dataloader_num_workers")
        t.note(
            "training.dataloader_num_workers",
            "'auto' → data.num_workers left at honing's default (rows read in the training process; set it to read "
            "them in worker processes)",
        )
    else:
        training.copy("dataloader_num_workers", "data.num_workers", int)
    minutes = training.take("nccl_default_timeout_minutes")
    if minutes is not None:
        t.set("parallel.timeout_seconds", float(minutes) * 60)
    training.copy("compile", "parallel.compile", bool)
    if training.take("enable_gradient_checkpointing"):
        t.set("parallel.activation_checkpointing", "full")
    if training.peek("gradient_checkpointing_kwargs"):
        training.refuse("gradient_checkpointing_kwargs", "not translated: honing checkpoints whole blocks")
    training.take("gradient_checkpointing_kwargs")
    mixed = str(training.take("mixed_precision_dtype", "NONE")).upper()
    if mixed == "BF16":
        t.set("trainer.precision", "bf16-mixed")
    elif mixed not in ("NONE", "FP32"):
        t.refuse("training.mixed_precision_dtype", f"{mixed!r} is not available; honing mixes in bf16 only")
    for name in ("include_performance_metrics", "include_alternative_mfu_metrics"):
        if training.take(name):
            t.note(f"training.{name}", "honing always logs throughput and MFU (callbacks.speed_monitor)")
    for name in ("log_model_summary", "ddp_find_unused_parameters", "dataloader_prefetch_factor", "log_level"):
        if training.has(name):
            t.note(f"training.{name}", "not needed: honing has no such setting (the run is the same)")
        training.take(name)
    training.allow("enable_mlflow", (False,), "is not available: honing logs to W&B, TensorBoard and metrics.jsonl")
    training.done()


def grpo_batch(t: Translation, training: Keys, completions: int, verl: bool) -> None:
    """GRPO's prompts per step: verl's ``data.train_batch_size``; TRL's batch counts completions, G per prompt."""
    if verl:
        t.set("data.global_batch_size", VERL_TRAIN_BATCH_SIZE)  # verl's default; its overrides may change it
        for name in ("per_device_train_batch_size", "gradient_accumulation_steps"):
            if training.has(name):
                t.note(f"training.{name}", "not read by verl (its data.train_batch_size counts prompts)")
        return
    generations = int((training.peek("grpo") or {}).get("num_generations") or TRL_NUM_GENERATIONS)
    if completions % generations:
        t.refuse(
            "training.per_device_train_batch_size",
            f"x gradient_accumulation_steps ({completions}) must be a "
            f"multiple of training.grpo.num_generations ({generations}), as in TRL",
        )
        return
    t.set("data.global_batch_size", completions // generations)


def translate_checkpoints(t: Translation, training: Keys) -> None:
    """``save_steps`` / ``save_epoch`` / ``save_final_model`` / resuming."""
    save_steps = training.take("save_steps", 500)
    t.set("callbacks.checkpointer.save_interval", int(save_steps) if int(save_steps) > 0 else 10**9)
    if training.take("save_epoch", False):
        t.set("callbacks.checkpointer.save_at_epoch_end", True)
    training.allow("save_final_model", (True,), "is not available: honing always exports the final model (hf/)")
    training.allow(
        "save_only_model", (False,), "is not available: honing's checkpoints hold the optimizer too, for exact resume"
    )
    resume = training.take("resume_from_checkpoint")
    if resume:
        t.set("trainer.load_path", str(resume))
        t.set("trainer.load_strategy", "always")
    try_resume = training.take("try_resume_from_last_checkpoint")
    if try_resume is not None and not resume:
        t.set("trainer.load_strategy", "if_available" if try_resume else "never")


def translate_eval_and_logging(t: Translation, training: Keys, method: str) -> None:
    """``eval_strategy`` / ``eval_steps``, ``logging_*``, trackers."""
    strategy = str(training.take("eval_strategy", "no")).lower()
    eval_steps = training.take("eval_steps")
    if method == "grpo":
        if strategy != "no":
            t.refuse(
                "training.eval_strategy",
                f"{strategy!r} is not available for GRPO: honing logs the reward of "
                "every step and has no validation pass",
            )
    elif strategy == "no":
        t.set("callbacks.evaluator.enabled", False)
        if eval_steps is not None:
            t.note("training.eval_steps", "unused: training.eval_strategy is 'no' (as in transformers)")
    elif strategy == "steps":
        t.set("callbacks.evaluator.interval", int(eval_steps or training.peek("logging_steps", 500)))
    else:
        t.refuse("training.eval_strategy", f"{strategy!r} is not available: honing evaluates every N steps ('steps')")
    logging = str(training.take("logging_strategy", "steps")).lower()
    if logging != "steps":
        t.refuse("training.logging_strategy", f"{logging!r} is not available: honing logs every N steps ('steps')")
    training.copy("logging_steps", "callbacks.console.log_interval", int)
    if training.take("logging_first_step") is not None:
        t.note("training.logging_first_step", "honing always logs the first step")
    training.copy("enable_wandb", "callbacks.wandb.enabled", bool)
    training.copy("enable_tensorboard", "callbacks.tensorboard.enabled", bool)


def translate_grpo(t: Translation, grpo: Keys, *, method: str, verl: bool) -> None:
    """``training.grpo.*`` as honing's ``grpo.*``; vLLM rollouts are refused."""
    if method != "grpo":
        if grpo.values:
            t.refuse("training.grpo", f"used by GRPO trainers only, not {method!r}")
        return
    grpo.copy("max_completion_length", "grpo.max_completion_length", int)
    grpo.copy("num_generations", "grpo.num_generations", int)
    grpo.copy("temperature", "grpo.temperature", float)
    grpo.copy("epsilon", "grpo.epsilon", float)
    prompt_length = grpo.take("max_prompt_length")
    if prompt_length is not None:
        # honing drops a prompt that leaves less than max_completion_length tokens of data.seq_len
        t.set("data.seq_len", int(prompt_length) + int(t.get("grpo.max_completion_length", 256)))
    if grpo.take("use_vllm"):
        t.refuse(
            "training.grpo.use_vllm",
            "true is not available: honing samples completions with its own KV-cache "
            "generation in the training process (no vLLM backend; README, 'A vLLM-style rollout backend'); "
            "set it to false",
        )
        grpo.take("vllm_gpu_memory_utilization")
        grpo.take("vllm_mode")
    else:
        for name in ("vllm_gpu_memory_utilization", "vllm_mode"):
            grpo.refuse(name, "used only with use_vllm: true, which honing does not have")
    grpo.allow("remove_unused_columns", (False,), "is not available: honing passes every column to the rewards")
    if grpo.take("log_completions"):
        t.note(
            "training.grpo.log_completions",
            "completions and rewards go to samples.jsonl every grpo.sample_interval steps",
        )
    grpo.refuse("repetition_penalty", "not available: honing samples with temperature, top_p and top_k")
    grpo.refuse("model_init_kwargs", "not translated: give honing's model.* keys")
    grpo.done()


def translate_peft(t: Translation, peft: Keys, *, use_peft: bool, method: str) -> None:
    """``peft.*`` as ``model.lora`` when ``training.use_peft``; without it, full fine-tuning."""
    if not use_peft:
        if peft.values:
            t.refuse("peft", "set, but training.use_peft is not true: set it, or remove the peft section")
        if method == "vl_sft":
            t.set("model.lora", None)  # honing's vl_sft default is LoRA; Oumi's is full fine-tuning
        return
    lora: dict[str, Any] = {
        "rank": int(peft.take("lora_r", 8)),
        "alpha": float(peft.take("lora_alpha", 8)),
        "dropout": float(peft.take("lora_dropout", 0.0)),
        "bias": str(peft.take("lora_bias", "none")),
        "task_type": str(peft.take("lora_task_type", "CAUSAL_LM")).upper(),
    }
    targets = peft.take("lora_target_modules")
    if targets is None and method != "vl_sft":
        targets = PEFT_DEFAULT_TARGETS
        t.note("peft.lora_target_modules", f"unset: peft's default for Llama / Qwen / Mistral, {targets}")
    if targets is not None:
        lora["target_modules"] = targets
    modules_to_save = peft.take("lora_modules_to_save")
    if modules_to_save:
        lora["modules_to_save"] = list(modules_to_save)
    t.set("model.lora", lora)
    if peft.take("q_lora", False):  # QLoRA: the base's weights quantized (torchao here, bitsandbytes in Oumi)
        bits = peft.allow("q_lora_bits", (4, 8), "is not available: honing quantizes to 4 (nf4) or 8 bits (int8)")
        if bits == 8:
            t.set("model.quantize", "int8")
        else:
            peft.allow("bnb_4bit_quant_type", ("nf4",), "is not available: honing's 4-bit weights are NF4 (torchao)")
            t.set("model.quantize", "nf4")
    peft.allow(
        "peft_save_mode",
        ("adapter_only", "ADAPTER_ONLY"),
        "is not available: honing saves the adapter (adapter/) and the merged model (hf/)",
    )
    peft.allow(
        "lora_init_weights", ("DEFAULT", "default", True), "is not available: honing uses peft's default initialisation"
    )
    peft.done()
