"""Every field of transformers' ``TrainingArguments`` (``key_table("trl").keys["TrainingArguments"]``), the base of
every TRL config class, with its verdict: honoured (the honing key it becomes), moot (why honing needs no such setting)
or refused (why, and what to give instead). ``trl_args.py`` reads the honoured ones; ``test_trl_schema_walk.py`` checks
that every installed field is here and that each honoured one reaches its honing key."""

from __future__ import annotations

from honing.interop.configs.axolotl_reasons import KERNEL, LOADER, MODEL_AND_OPTIMIZER, TRACKER
from honing.interop.configs.schema_table import Entry, honoured, moot, refused

EVAL = "not needed: honing evaluates the validation loss every callbacks.evaluator.interval steps"
LOGS = "not needed: honing logs at INFO on rank 0"
DDP = "not needed: FSDP2 (honing's default for several processes) needs no such setting"
JIT_CHECKPOINT = (
    "not needed: honing always saves on SIGTERM / SIGINT (the step finishes, a checkpoint is written, exit 0: "
    "honing.train.signals)"
)
PREDICT = (
    "not needed: transformers' Trainer never reads it (its example scripts do); `honing generate` / `honing eval` "
    "predict"
)

TRAINING_ARGUMENTS: dict[str, Entry] = {
    **honoured("trainer.save_folder", "output_dir"),
    **honoured(
        "data.micro_batch_size and data.batch_size_per_rank (x gradient_accumulation_steps); default 8 filled in",
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
    ),  # fmt: skip
    **honoured(
        "trainer.max_duration (Nepochs; default 3 filled in; max_steps > 0 wins: Nsteps)",
        "num_train_epochs",
        "max_steps",
    ),  # fmt: skip
    **honoured("optim.lr (the class's default filled in: honing's differs)", "learning_rate"),
    **honoured("scheduler.name with scheduler.semantics: transformers (default linear filled in)", "lr_scheduler_type"),
    **honoured("scheduler.kwargs.*, the keys the schedule reads", "lr_scheduler_kwargs"),
    **honoured("scheduler.warmup_steps (>= 1) or scheduler.warmup_ratio (a fraction < 1)", "warmup_steps"),
    **honoured("optim.name (8-bit AdamW: optim.state_dtype: int8)", "optim"),
    **honoured(
        "sgd: momentum / weight_decay as optim.* (torch's momentum 0 filled in without it), dampening / nesterov "
        "refused; adamw / adafactor: a note (transformers reads none for them)",
        "optim_args",
    ),  # fmt: skip
    **moot(
        "not needed: transformers reads it only for GaLore / APOLLO-family optimizers, which optim refuses",
        "optim_target_modules",
    ),  # fmt: skip
    **honoured("optim.weight_decay (default 0.0 filled in: honing's differs)", "weight_decay"),
    **honoured("optim.betas (default [0.9, 0.999] filled in: honing's differ)", "adam_beta1", "adam_beta2"),
    **honoured("optim.eps", "adam_epsilon"),
    **honoured("optim.grad_clip (0: none)", "max_grad_norm"),
    **moot("honing averages the loss over the tokens of every rank's batch", "average_tokens_across_devices"),
    **refused(
        "not available: honing's losses take the labels as they are (no label smoothing of the LM loss)",
        "label_smoothing_factor",
    ),  # fmt: skip
    **honoured("trainer.precision: bf16-mixed (TRL's default: on unless fp16; false leaves fp32)", "bf16"),
    **honoured("trainer.precision: fp16-mixed", "fp16"),
    **moot(EVAL, "bf16_full_eval", "fp16_full_eval"),
    **moot("not needed: torch's TF32 matmul setting; honing leaves it as PyTorch sets it", "tf32"),
    **honoured(
        "parallel.activation_checkpointing: full (TRL's default true filled in; false: none)",
        "gradient_checkpointing",
        "activation_checkpointing",
    ),  # fmt: skip
    **honoured(
        "every_n_layers: parallel.activation_checkpointing: every_n with activation_checkpointing_every; offload: "
        "parallel.activation_offload; use_reentrant a note (always non-reentrant); another key refused",
        "activation_checkpointing_kwargs",
        "gradient_checkpointing_kwargs",
    ),  # fmt: skip
    **honoured("parallel.compile", "torch_compile"),
    **honoured(
        "parallel.compile: true ('inductor' / 'default', what it runs, as olmOCR's configs give them; another "
        "backend or mode refused)",
        "torch_compile_backend",
        "torch_compile_mode",
    ),  # fmt: skip
    **moot(KERNEL, "use_liger_kernel", "liger_kernel_config"),
    **moot(
        "not needed for training: an inference engine's setting (honing generate / chat have their own)", "use_cache"
    ),  # fmt: skip
    **honoured(
        "sft.neftune_noise_alpha (SFT and GKD; refused by the other classes: honing adds it to SFT only)",
        "neftune_noise_alpha",
    ),  # fmt: skip
    **moot(
        "not needed: honing's garbage collector callback runs every callbacks.garbage_collector.interval steps",
        "torch_empty_cache_steps",
    ),  # fmt: skip
    **refused("not available: honing's batch sizes are given, not searched", "auto_find_batch_size"),
    **honoured(
        "callbacks.console.log_interval ('no' / 'epoch': a note; TRL's default 10 filled in)",
        "logging_strategy",
        "logging_steps",
    ),  # fmt: skip
    **moot("honing logs the first step too", "logging_first_step"),
    **moot(LOGS, "log_on_each_node", "log_level", "log_level_replica", "disable_tqdm", "debug", "skip_memory_metrics"),
    **moot("not needed: honing stops on a non-finite loss (trainer.nonfinite_loss)", "logging_nan_inf_filter"),
    **moot("not needed: honing always logs throughput (callbacks.speed_monitor)", "include_num_input_tokens_seen"),
    **honoured("callbacks.wandb.enabled / callbacks.tensorboard.enabled", "report_to"),
    **honoured("run_name", "run_name"),
    **honoured("callbacks.wandb.project (with report_to: wandb)", "project"),
    **refused(TRACKER, "trackio_space_id", "trackio_bucket_id", "trackio_static_space_id"),
    **honoured(
        "callbacks.evaluator.interval ('steps'; eval_steps unset: logging_steps, as transformers); 'epoch': "
        "callbacks.evaluator.every_epoch; 'no': callbacks.evaluator.enabled: false",
        "eval_strategy",
        "eval_steps",
    ),  # fmt: skip
    **honoured("callbacks.evaluator.batch_size", "per_device_eval_batch_size"),
    **moot(
        EVAL,
        "eval_delay",
        "prediction_loss_only",
        "eval_do_concat_batches",
        "eval_use_gather_object",
        "eval_accumulation_steps",
        "include_for_metrics",
        "batch_eval_metrics",
        "label_names",
    ),  # fmt: skip
    **honoured("callbacks.evaluator.before_training", "eval_on_start"),
    **moot(MODEL_AND_OPTIMIZER, "save_only_model"),
    **honoured(
        "callbacks.checkpointer.save_interval ('no': never on the way; 'epoch': save_at_epoch_end)",
        "save_strategy",
        "save_steps",
    ),  # fmt: skip
    **moot("not needed: rank 0 writes the checkpoints' shared files", "save_on_each_node"),
    **honoured("callbacks.checkpointer.keep_last", "save_total_limit"),
    **moot(JIT_CHECKPOINT, "enable_jit_checkpoint"),
    **honoured(
        "callbacks.hub.repo_id (with push_to_hub; else output_dir's name, as transformers names it)",
        "push_to_hub",
        "hub_model_id",
    ),  # fmt: skip
    **honoured("callbacks.hub.strategy (every_save: the final export, noted)", "hub_strategy"),
    **honoured("callbacks.hub.private", "hub_private_repo"),
    **honoured("callbacks.hub.revision", "hub_revision"),
    **moot("not needed: honing queues every push in order and skips none", "hub_always_push"),
    **moot("not needed: the environment's token (HF_TOKEN) is used", "hub_token"),
    **honoured("callbacks.evaluator.load_best_model_at_end", "load_best_model_at_end"),
    **honoured("callbacks.evaluator.metric_for_best_model", "metric_for_best_model"),
    **honoured("callbacks.evaluator.greater_is_better", "greater_is_better"),
    **refused(
        "not available: honing skips the batches already seen when it resumes (exact resume)", "ignore_data_skip"
    ),  # fmt: skip
    **moot("not needed: honing's callbacks resume with the trainer's state", "restore_callback_states_from_checkpoint"),
    **moot(
        "honing's runs repeat for a seed (the same losses); deterministic kernels are not forced", "full_determinism"
    ),  # fmt: skip
    **honoured("trainer.seed (default 42 filled in)", "seed"),
    **honoured("trainer.seed: the same as seed, else refused (honing's data order follows one seed)", "data_seed"),
    **honoured("trainer.device: cpu", "use_cpu"),
    **moot("not needed: honing's config has no accelerate settings", "accelerator_config"),
    **honoured(
        "parallel.dp_replicate / dp_shard / tp / cp (accelerate's *_size; sp_size > 1 refused: give cp_size)",
        "parallelism_config",
    ),  # fmt: skip
    **moot(
        "not needed: honing's loader always drops an epoch's last rows short of a full global batch "
        "(honing.data.loader: batches_per_epoch)",
        "dataloader_drop_last",
    ),  # fmt: skip
    **honoured("data.num_workers", "dataloader_num_workers"),
    **moot(
        LOADER,
        "dataloader_pin_memory",
        "dataloader_persistent_workers",
        "dataloader_prefetch_factor",
        "dataloader_multiprocessing_context",
        "dataloader_in_order",
    ),  # fmt: skip
    **moot("not needed: honing's rows keep the columns their method reads", "remove_unused_columns"),
    **honoured(
        "data.group_by_length ('group_by_length'), data.shuffle: false ('sequential'); 'random' fills "
        "data.group_by_length: false",
        "train_sampling_strategy",
    ),  # fmt: skip
    **moot("not needed: honing measures its rows' lengths itself", "length_column_name"),
    **moot(
        DDP,
        "ddp_find_unused_parameters",
        "ddp_bucket_cap_mb",
        "ddp_broadcast_buffers",
        "ddp_static_graph",
        "ddp_backend",
    ),  # fmt: skip
    **honoured("parallel.timeout_seconds", "ddp_timeout"),
    **honoured("parallel.strategy: fsdp and its settings", "fsdp", "fsdp_config"),
    **honoured("parallel.* (ZeRO stage, offload, precision of the DeepSpeed JSON)", "deepspeed"),
    **moot(
        "not needed: `honing train` trains; evaluation runs every callbacks.evaluator.interval steps",
        "do_train",
        "do_eval",
    ),  # fmt: skip
    **moot(PREDICT, "do_predict"),
    **honoured(
        "trainer.load_path with trainer.load_strategy: always (TRL's scripts resume from it)", "resume_from_checkpoint"
    ),  # fmt: skip
    **moot("not needed: torchrun sets the rendezvous (honing train --nproc N, or torchrun's own flags)", "local_rank"),
}
