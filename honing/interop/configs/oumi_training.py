"""Oumi's ``training`` section as honing's trainer, optimizer, schedule, callbacks and GRPO keys; ``VERL_GRPO``'s
``verl_config_overrides`` through the table in ``honing.interop.configs.verl``. Where a key is absent the Oumi
run's default stays (``oumi_defaults``); keys that only tune another engine get one note each."""

from __future__ import annotations

from honing.interop.configs.hf_args import (
    duration,
    optimizer_family,
    read_logging_strategy,
    set_optimizer,
    set_schedule,
    set_warmup,
)
from honing.interop.configs.oumi_distill import translate_distill
from honing.interop.configs.oumi_trl_kwargs import translate_rest_as_trl
from honing.interop.configs.translation import Keys, Translation, read_number
from honing.interop.configs.trl_grpo_batch import (
    TRL_NUM_GENERATIONS,
    steps_as_rollout_batches,
    translate_trl_grpo_batch,
    trl_generation_keys,
)
from honing.interop.configs.trl_method_keys import read_dpo_loss
from honing.interop.configs.verl import VERL_DEFAULT_REWARDS, translate_verl_overrides, verl_default_reward

# verl's default data.train_batch_size (prompts per step), used by VERL_GRPO when the overrides do not set it
VERL_TRAIN_BATCH_SIZE = 1024
# Oumi's TrainingParams defaults that decide honing keys below
OUMI_PER_DEVICE_BATCH = 8
OUMI_EVAL_STEPS = 500
# verl's trainer.test_freq -1 (no validation during training) as callbacks.evaluator.interval: the last step only
VERL_NO_TEST_FREQ = 10**9
VERL_TEST_FREQ = "verl's trainer.test_freq -1: no validation on the way (honing's evaluator: at the last step too)"
# training.* keys honing's own engine makes moot -> why (one note each when set)
MOOT_TRAINING = {
    "empty_device_cache_steps": "unused: it only hands cached device memory back every N steps; training is the same",
    "dataloader_main_process_only": "not needed: each honing rank reads its own slice of every batch",
    "dataloader_persistent_workers": "unused: it only keeps loader processes between epochs; the batches are the same",
    "dataloader_prefetch_factor": "unused: honing's loader processes (data.num_workers) read 2 batches ahead each",
    "log_model_summary": "not needed: honing logs the model's parameter counts at the start",
    "ddp_find_unused_parameters": "not needed: FSDP2 (honing's default for several processes) needs no such flag",
    "log_level": "not needed: honing logs at INFO on rank 0 (Python's logging)",
    "dep_log_level": "not needed: honing logs at INFO on rank 0 (Python's logging)",
    "logging_dir": "honing writes TensorBoard events under the save folder (SAVE_FOLDER/tensorboard)",
    "log_examples": "not needed: `honing data CONFIG` reports the rows as training sees them",
    "full_determinism": "honing's runs repeat for a seed (the same losses); deterministic kernels are not forced",
    "include_alternative_mfu_metrics": "honing always logs throughput and MFU (callbacks.speed_monitor)",
    "include_performance_metrics": "honing always logs throughput and MFU (callbacks.speed_monitor)",
}


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
    updates = translate_batch(t, training, method, verl)
    translate_optimizer(t, training)
    training.copy("seed", "trainer.seed", int)
    if training.has("data_seed") and training.peek("data_seed") != t.get("trainer.seed"):
        training.refuse(
            "data_seed", "not available: honing's data order and initialisation follow one seed (training.seed)"
        )
    training.take("data_seed")
    translate_checkpoints(t, training)
    translate_eval_and_logging(t, training, method, verl)
    translate_grpo(t, t.section(training.take("grpo"), "training.grpo"), method=method, verl=verl)
    translate_distill(t, training, method=method)  # training.gkd / training.gold
    rewards = training.take("reward_functions")
    if rewards:
        if method not in ("grpo", "vl_grpo"):
            t.refuse("training.reward_functions", f"used by GRPO trainers only, not {method!r}")
        else:
            names = [rewards] if isinstance(rewards, str) else rewards if isinstance(rewards, list) else [rewards]
            # verl's reward signature (data_source, solution_str, ground_truth, extra_info): honing.interop.verl_rewards
            t.set("grpo.rewards", [{"name": f"verl:{name}" if verl else name} for name in names])
    if verl:
        translate_verl_overrides(t, t.section(training.take("verl_config_overrides"), "training.verl_config_overrides"))
        if not t.get("grpo.rewards"):  # neither reward_functions nor verl's custom_reward_function
            # verl then scores each row with its built-in reward for the row's data_source (verl.utils.reward_score)
            default = verl_default_reward(t)
            if default is not None:
                t.set("grpo.rewards", [{"name": default}])
                t.note(
                    "training.reward_functions",
                    f"{rewards!r} → [{default}]: verl's built-in score for the data set's rows (its data_source)",
                )
            else:
                t.refuse(
                    "training.reward_functions",
                    f"{rewards!r}: verl's built-in reward for each row's data_source is ported for "
                    f"{', '.join(VERL_DEFAULT_REWARDS)} only; name a reward (e.g. [countdown]) or your own function",
                )
    else:
        training.refuse("verl_config_overrides", "used by trainer_type VERL_GRPO only")
    training.take("use_peft")  # read with the peft section
    kwargs = t.section(training.take("trainer_kwargs"), "training.trainer_kwargs")
    translate_trainer_kwargs(t, kwargs, method, trl_grpo=method in ("grpo", "vl_grpo") and not verl)
    if training.peek("dataloader_num_workers") == "auto":  # Oumi: as many as the machine suits; honing's default
        training.take("dataloader_num_workers")
        t.note(
            "training.dataloader_num_workers",
            "'auto' → data.num_workers left at honing's default (rows read in the training process; set it to read "
            "them in worker processes)",
        )
    else:
        training.copy("dataloader_num_workers", "data.num_workers", int)
    minutes = training.number("nccl_default_timeout_minutes", float)
    if minutes is not None:
        t.set("parallel.timeout_seconds", minutes * 60)
    translate_engine(t, training)
    if updates > 1:  # after every step count is written: TRL's count optimizer steps, honing's rollout batches
        steps_as_rollout_batches(t, updates, "training.", "training.trainer_kwargs")
    training.allow("enable_mlflow", (False,), "is not available: honing logs to W&B, TensorBoard and metrics.jsonl")
    training.done()


def translate_batch(t: Translation, training: Keys, method: str, verl: bool) -> int:
    """``per_device_train_batch_size`` x ``gradient_accumulation_steps``: rows per micro-batch and per step; the
    optimizer steps one honing step takes (GRPO: TRL's steps per rollout batch; else 1)."""
    given = training.has("per_device_train_batch_size")
    per_device = training.number("per_device_train_batch_size", int, OUMI_PER_DEVICE_BATCH)
    accumulation = training.number("gradient_accumulation_steps", int, 1)
    if method in ("grpo", "vl_grpo"):
        return grpo_batch(t, training, per_device, accumulation, verl)
    # per device, as the HF Trainer reads them: under torchrun each process steps on this many rows
    if given:
        t.set("data.micro_batch_size", per_device)
        t.set("data.batch_size_per_rank", per_device * accumulation)
    else:
        whose = "Oumi's training.per_device_train_batch_size"
        t.default("data.micro_batch_size", per_device, whose)
        t.default("data.batch_size_per_rank", per_device * accumulation, f"{whose} x gradient_accumulation_steps")
    return 1


def translate_optimizer(t: Translation, training: Keys) -> None:
    """The optimizer, its settings and the learning-rate schedule with its warmup."""
    if training.has("optimizer"):
        set_optimizer(t, training.key("optimizer"), str(training.peek("optimizer")))
    family = optimizer_family(str(training.take("optimizer", "adamw_torch")))
    training.copy("learning_rate", "optim.lr", float)
    training.copy("weight_decay", "optim.weight_decay", float)
    if family in ("adamw", "muon"):
        if training.has("adam_beta1") or training.has("adam_beta2"):
            betas = [training.number("adam_beta1", float, 0.9), training.number("adam_beta2", float, 0.999)]
            t.set("optim.betas", betas)
        training.copy("adam_epsilon", "optim.eps", float)
    else:  # Oumi passes AdamW's settings to every optimizer; the others ignore them, and honing refuses them
        t.unset("optim.betas")
        t.unset("optim.eps")
        for name in ("adam_beta1", "adam_beta2", "adam_epsilon"):
            training.note(name, f"unused by the {family} optimizer (as in Oumi)")
    if family == "sgd":
        if training.has("sgd_momentum"):
            training.copy("sgd_momentum", "optim.momentum", float)
        else:
            t.default("optim.momentum", 0.0, "Oumi's training.sgd_momentum")
    training.take("sgd_momentum")
    if "max_grad_norm" in training.values:
        norm = training.number("max_grad_norm", float)
        t.set("optim.grad_clip", norm if norm else None)
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


def translate_trainer_kwargs(t: Translation, kwargs: Keys, method: str, *, trl_grpo: bool = False) -> None:
    """``trainer_kwargs``: extra arguments of TRL's config that honing has a key for (``max_length``, DPO's loss keys:
    ``beta``, ``loss_type`` and ``loss_weights``, ``ld_alpha``, ...); every other one refused by name."""
    if method in ("sft", "vl_sft", "dpo", "vl_dpo", "kto", "pretrain"):
        kwargs.copy("max_length", "data.seq_len", int)
    if method == "sft":
        kwargs.copy("neftune_noise_alpha", "sft.neftune_noise_alpha", float)
    if method == "kto":
        for name, kind in (("beta", float), ("desirable_weight", float), ("undesirable_weight", float)):
            kwargs.copy(name, f"kto.{name}", kind)
        kwargs.copy("loss_type", "kto.loss_type", str)
    if method in ("dpo", "vl_dpo"):  # DPOConfig's loss keys: beta, loss_type (or a list), ld_alpha, ...
        read_dpo_loss(t, kwargs)
    if method == "vl_dpo":
        kwargs.note(
            "max_prompt_length",
            "not needed: honing never cuts an image prompt (its image tokens), as TRL's keep_start truncation; the "
            "replies are cut to fit data.seq_len, and a pair whose prompt alone fills it is dropped",
        )
    if trl_grpo:  # TRL's GRPOConfig: steps_per_generation read with the batch (translate_batch)
        kwargs.take("steps_per_generation")
        kwargs.copy("num_iterations", "grpo.num_iterations", int)
        kwargs.refuse(
            "generation_batch_size",
            "not translated: its optimizer steps per generation depend on the processes; give steps_per_generation "
            "(generation_batch_size / (per_device_train_batch_size x processes))",
        )
    kwargs.note("remove_unused_columns", "not needed: honing's rows keep the columns their method reads")
    translate_rest_as_trl(t, kwargs, method)  # every other key as TRL's config class reads it
    kwargs.done("not an argument honing has a key for; give honing's own keys")


def translate_engine(t: Translation, training: Keys) -> None:
    """Compilation, activation checkpointing, mixed precision, and the keys honing's engine makes moot."""
    training.copy("compile", "parallel.compile", bool)
    checkpointing = bool(training.take("enable_gradient_checkpointing"))
    if training.take("use_deterministic"):
        t.note(
            "training.use_deterministic",
            "honing's runs repeat for a seed (the same losses); like Oumi, activation checkpointing is then off",
        )
        checkpointing = False
    if checkpointing:
        t.set("parallel.activation_checkpointing", "full")
    kwargs = t.section(training.take("gradient_checkpointing_kwargs"), "training.gradient_checkpointing_kwargs")
    kwargs.note("use_reentrant", "not needed: honing's activation checkpointing is always non-reentrant")
    kwargs.done("honing checkpoints whole blocks, non-reentrant")
    mixed = str(training.take("mixed_precision_dtype", "NONE")).upper()
    if mixed in ("BF16", "FP16"):  # transformers' bf16 / fp16: True, autocast over fp32 weights
        t.set("trainer.precision", f"{mixed.lower()}-mixed")
    elif mixed not in ("NONE", "FP32"):
        t.refuse("training.mixed_precision_dtype", f"{mixed!r} is not available; expected BF16, FP16 or NONE")
    for name, why in MOOT_TRAINING.items():
        if training.peek(name) not in (None, False):
            t.note(f"training.{name}", why)
        training.take(name)
    training.note("label_ignore_index", "not needed: honing marks unlabelled positions itself (-100)")


def grpo_batch(t: Translation, training: Keys, per_device: int, accumulation: int, verl: bool) -> int:
    """GRPO's prompts per step: verl's ``data.train_batch_size``; TRL's batch counts completions per device, G per
    prompt (``honing.interop.configs.trl_grpo_batch``). Returns the optimizer steps of one honing step."""
    if verl:
        t.default("data.global_batch_size", VERL_TRAIN_BATCH_SIZE, "verl's data.train_batch_size")  # overrides set it
        for name in ("per_device_train_batch_size", "gradient_accumulation_steps"):
            if training.has(name):
                t.note(f"training.{name}", "not read by verl (its data.train_batch_size counts prompts)")
        return 1
    grpo = training.peek("grpo")
    generations = grpo.get("num_generations") if isinstance(grpo, dict) else None
    generations = read_number(t, "training.grpo.num_generations", generations or TRL_NUM_GENERATIONS, int)
    steps, iterations = trl_generation_keys(training.peek("trainer_kwargs"))
    kwargs = "training.trainer_kwargs"
    steps = read_number(t, f"{kwargs}.steps_per_generation", steps, int) if steps is not None else None
    iterations = read_number(t, f"{kwargs}.num_iterations", iterations, int, 1) if iterations is not None else 1
    if steps is not None and steps < 1:
        t.refuse(f"{kwargs}.steps_per_generation", f"{steps}: give a positive number of per-device batches")
        return 1
    if not generations or generations < 1 or not iterations or iterations < 1:
        return 1  # refused by honing's own bounds (grpo.num_generations, grpo.num_iterations)
    keys = {
        "per_device": "training.per_device_train_batch_size",
        "accumulation": "training.gradient_accumulation_steps",
        "generations": "training.grpo.num_generations",
        "steps_per_generation": f"{kwargs}.steps_per_generation",
    }
    given = training.has("per_device_train_batch_size") or training.has("gradient_accumulation_steps")
    return translate_trl_grpo_batch(
        t,
        keys,
        given=given or steps is not None,
        whose="Oumi's training.per_device_train_batch_size x gradient_accumulation_steps / TRL's num_generations",
        per_device=per_device,
        accumulation=accumulation,
        generations=generations,
        steps_per_generation=steps,
        num_iterations=iterations,
    )


def translate_checkpoints(t: Translation, training: Keys) -> None:
    """``save_steps`` / ``save_epoch`` / ``save_final_model`` / resuming."""
    save_steps = training.number("save_steps", int)
    if save_steps is not None:
        # 0: no checkpoints on the way (honing still saves one at the end, as Oumi's final model)
        t.set("callbacks.checkpointer.save_interval", save_steps if save_steps > 0 else 10**9)
    if training.take("save_epoch", False):
        t.set("callbacks.checkpointer.save_at_epoch_end", True)
    if training.take("save_final_model") is False:
        t.note("training.save_final_model", "false: honing still exports the final model (hf/); delete it if unwanted")
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


def translate_eval_and_logging(t: Translation, training: Keys, method: str, verl: bool = False) -> None:
    """``eval_strategy`` / ``eval_steps``, ``logging_*``, trackers."""
    strategy = str(training.take("eval_strategy", "no")).lower()
    eval_steps = training.number("eval_steps", int)
    if verl and strategy == "no":  # verl validates whatever Oumi's strategy says: verl's test_freq -1
        t.default("callbacks.evaluator.interval", VERL_NO_TEST_FREQ, VERL_TEST_FREQ)
        if eval_steps is not None:
            t.note("training.eval_steps", "unused: training.eval_strategy is 'no' (Oumi leaves verl's test_freq)")
    elif strategy == "no":
        if training.has("eval_strategy"):
            t.set("callbacks.evaluator.enabled", False)
        elif t.get("data.validation") is not None:
            t.default("callbacks.evaluator.enabled", False, "Oumi's training.eval_strategy: no")
        if eval_steps is not None:
            t.note("training.eval_steps", "unused: training.eval_strategy is 'no' (as in transformers)")
    elif strategy == "steps":
        if eval_steps is not None:
            t.set("callbacks.evaluator.interval", eval_steps)
        else:
            t.default("callbacks.evaluator.interval", OUMI_EVAL_STEPS, "Oumi's training.eval_steps")
        if not training.has("per_device_eval_batch_size"):
            t.default("callbacks.evaluator.batch_size", OUMI_PER_DEVICE_BATCH, "Oumi's per_device_eval_batch_size")
    elif strategy == "epoch":
        t.set("callbacks.evaluator.every_epoch", True)
        if eval_steps is not None:
            t.note("training.eval_steps", "unused: training.eval_strategy is 'epoch' (as in transformers)")
        if not training.has("per_device_eval_batch_size"):
            t.default("callbacks.evaluator.batch_size", OUMI_PER_DEVICE_BATCH, "Oumi's per_device_eval_batch_size")
    else:
        t.refuse("training.eval_strategy", f"{strategy!r} is not one of transformers' 'no', 'steps', 'epoch'")
    if verl:
        training.note("per_device_eval_batch_size", "not read by verl (its data.val_batch_size counts prompts)")
    training.copy("per_device_eval_batch_size", "callbacks.evaluator.batch_size", int)
    read_logging_strategy(t, "training.logging_strategy", training.take("logging_strategy"))
    training.copy("logging_steps", "callbacks.console.log_interval", int)
    if training.take("logging_first_step") is not None:
        t.note("training.logging_first_step", "honing always logs the first step")
    training.copy("enable_wandb", "callbacks.wandb.enabled", bool)
    training.copy("enable_tensorboard", "callbacks.tensorboard.enabled", bool)


def translate_grpo(t: Translation, grpo: Keys, *, method: str, verl: bool) -> None:
    """``training.grpo.*`` as honing's ``grpo.*``; TRL's held-out prompts sampled as its rollouts are."""
    if method not in ("grpo", "vl_grpo"):
        if grpo.values:
            t.refuse("training.grpo", f"used by GRPO trainers only, not {method!r}")
        return
    for name in ("vllm_device", "vllm_dtype", "vllm_max_model_len"):  # Oumi 0.1's vLLM engine settings
        grpo.note(name, "not needed: an older Oumi's vLLM engine setting; honing's own decoder samples in the training "
                        "process (grpo.vllm_mode: server for a rollout server)")  # fmt: skip
    grpo.copy("max_completion_length", "grpo.max_completion_length", int)
    grpo.copy("num_generations", "grpo.num_generations", int)
    grpo.copy("temperature", "grpo.temperature", float)
    grpo.copy("epsilon", "grpo.epsilon", float)
    prompt_length = grpo.number("max_prompt_length", int)
    if prompt_length is not None:
        # honing drops a prompt that leaves less than max_completion_length tokens of data.seq_len
        t.set("data.seq_len", prompt_length + int(t.get("grpo.max_completion_length", 256)))
    grpo.copy("use_vllm", "grpo.use_vllm", bool)  # a rollout server where one runs, else honing's own decoder
    grpo.copy("vllm_mode", "grpo.vllm_mode", str)
    grpo.note("vllm_gpu_memory_utilization", "a setting of the rollout server: serve.py --gpu-memory-utilization")
    if verl and t.get("data.validation") is not None:  # its overrides may say otherwise
        t.default("grpo.validation.before_training", True, "verl's trainer.val_before_train")
    elif t.get("data.validation") is not None:
        # TRL samples held-out prompts as it samples rollouts (num_generations_eval: num_generations)
        sampling = {"num_generations": int(t.get("grpo.num_generations", TRL_NUM_GENERATIONS))}
        sampling["temperature"] = float(t.get("grpo.temperature", 1.0))
        t.default("grpo.validation", sampling, "TRL's GRPOTrainer: held-out prompts are sampled as in training")
    grpo.allow("remove_unused_columns", (False,), "is not available: honing passes every column to the rewards")
    if grpo.take("log_completions"):
        t.note(
            "training.grpo.log_completions",
            "completions and rewards go to samples.jsonl every grpo.sample_interval steps",
        )
    penalty = grpo.number("repetition_penalty", float)
    if penalty is not None and penalty != 1.0:  # 1.0 divides by one: honing's default, which leaves vLLM's rollouts on
        t.set("grpo.repetition_penalty", penalty)  # transformers' RepetitionPenaltyLogitsProcessor's rule
    grpo.refuse("model_init_kwargs", "not translated: give honing's model.* keys")
    grpo.done()
