"""Every key of Oumi's ``TrainingConfig`` tree (``key_table("oumi")``, one group per nested dataclass) with its verdict:
honoured (the honing key it becomes), moot (why honing needs no such setting: a note when set) or refused (why, and
what to give instead: one line when set). The ``oumi_*`` translators read the keys; ``training.profiler``,
``training.telemetry`` and DeepSpeed's offload settings are walked against these rows (``schema_table.finish``).
``test_oumi_schema_walk.py`` checks every row against the translation."""

from __future__ import annotations

from honing.interop.configs.key_tables import key_table
from honing.interop.configs.schema_table import Entry, honoured, honoured_in, moot, refused

SOURCE = key_table("oumi").source

OUMI = f"Oumi's TrainingConfig ({SOURCE})"
OWN_ENGINE = "not needed: DeepSpeed's own tuning, which honing's FSDP2 has no setting for"
WRAPS = "not needed: honing's FSDP2 shards each transformer block by itself"
ULD = "not needed unless use_uld_loss: it tunes GOLD's cross-tokenizer loss, which honing does not build"
OWN_DECODER = "not needed: honing's own decoder samples the completions, in the training process"
UNUSED_Q = "not needed without peft.q_lora (as in Oumi); with it, honing quantizes the base itself (model.quantize)"

TOP: dict[str, Entry] = {
    **honoured("the sections below (model.*, data.*, trainer.*, optim.*, ...)", "data", "model", "training"),
    **honoured("model.lora (with training.use_peft)", "peft"),
    **honoured("parallel.* (with fsdp.enable_fsdp)", "fsdp"),
    **honoured("parallel.* (with deepspeed.enable_deepspeed)", "deepspeed"),
}

MODEL: dict[str, Entry] = {
    **honoured("model.name_or_path", "model_name"),
    **honoured("tokenizer.path (tokenizer.kind: pretrained)", "tokenizer_name"),
    **honoured("data.seq_len", "model_max_length"),
    **honoured("model.pretrained_weights", "load_pretrained_weights"),
    **honoured("model.trust_remote_code", "trust_remote_code"),
    **honoured(
        "trainer.precision (bfloat16 / bf16 → bf16, float16 / f16 → float16, float32 / f32 → float32)",
        "torch_dtype_str",
    ),
    **honoured("parallel.compile", "compile"),
    **honoured(
        "data.chat_template (llama3-instruct, chat_ml, zephyr, default, gpt2: honing's named templates; a family's: "
        "the tokenizer's own; unset: data.chat_template_fallback plain_roles, gpt2 models eos_separated)",
        "chat_template",
    ),
    **honoured("model.attn_implementation", "attn_implementation"),
    **honoured("model.config_overrides (a few load arguments as honing's own keys)", "model_kwargs"),
    **honoured(
        "model.freeze_layers (a transformers-4 name such as visual: where transformers 5 keeps it)", "freeze_layers"
    ),
    **moot("not needed: honing masks padding by position, so the pad token changes no loss", "tokenizer_pad_token"),
    **refused("not available: honing places the model itself (parallel.*); only 'auto' is read", "device_map"),
    **moot("not needed: honing's chunked loss (model.chunked_loss) never holds the full logits", "enable_liger_kernel"),
    **moot("not needed: honing evaluates the model as it trains it (sharded alike)", "shard_for_eval"),
    **moot("not needed for training: it parses tool calls at inference", "tool_call_parser"),
    **refused("not available: load a merged model (honing merge) or give model.lora", "adapter_model"),
    **moot(
        "not needed: pad_token, padding_side, use_fast, truncation_side 'right' and model_max_length change no step "
        "(a note each); a slow tokenizer, a cut from the left, a revision or another argument is refused",
        "tokenizer_kwargs",
    ),
    **refused("not available: honing passes no extra keyword arguments to the processor", "processor_kwargs"),
    **moot("not needed: Oumi's training does not read it (its vLLM inference does)", "chat_template_kwargs"),
    **honoured("model.load_kwargs.revision ('prequantized', Falcon-E's BitNet: refused)", "model_revision"),
}

DATA: dict[str, Entry] = {
    **honoured("data.train", "train"),
    **honoured("data.validation (and callbacks.evaluator)", "validation"),
    **moot("not needed: oumi train reads the train and validation splits only", "test"),
}

SPLIT: dict[str, Entry] = {
    **honoured("data.<split>.sources (one per dataset)", "datasets"),
    **honoured("data.train_on (text_completions_only_with_padding: assistant) or the method's rows", "collator_name"),
    **honoured("data.train_on: assistant (all_assistant_turns; final_assistant_turn refused)", "train_target"),
    **honoured("method: pretrain (Oumi packs documents: pretraining's rows)", "pack"),
    **honoured("data.<split>.sources[].text_field", "target_col"),
    **honoured("data.<split>.mixture.stop (when every dataset has a mixture_proportion)", "mixture_strategy"),
    **moot("not needed: honing reads sources whole (the same rows); `honing prepare` streams large ones", "stream"),
    **honoured("data.<split>.mixture.seed (when every dataset has a mixture_proportion)", "seed"),
    **moot("not needed: honing reads and prepares rows with its own loader", "use_torchdata"),
    **honoured(
        "data.train_on (train_on_completions_only), tokenizer.path (a VL processor_name); response / instruction "
        "templates, process_individually, ignore_index -100: notes; another argument refused",
        "collator_kwargs",
    ),
}

DATASET: dict[str, Entry] = {
    **honoured("data.<split>.sources[].path (a hub name) or its format (a file format's name)", "dataset_name"),
    **honoured("data.<split>.sources[].path", "dataset_path"),
    **honoured("data.<split>.sources[].subset", "subset"),
    **honoured(
        "data.<split>.sources[].path (NAME:SPLIT, datasets' slices too: 'train[90%:]'; 'train[:N]': max_samples N)",
        "split",
    ),
    **honoured("data.<split>.sources[].max_samples (a smaller data set is not repeated to the count)", "sample_count"),
    **honoured("data.<split>.sources[].proportion, with data.<split>.mixture (on every dataset)", "mixture_proportion"),
    **honoured("data.shuffle (each epoch, by trainer.seed); with sample_count, sources[].sample_seed", "shuffle"),
    **honoured("data.<split>.sources[] (the named data set's keyword arguments honing reads)", "dataset_kwargs"),
    **honoured("data.<split>.sources[].sample_seed with shuffle and sample_count (else not needed)", "seed"),
    **moot("not needed: honing reads sources whole, not through a streaming shuffle buffer", "shuffle_buffer_size"),
    **moot("not needed: the tokenizer and processor load with model.trust_remote_code", "trust_remote_code"),
    **moot("not needed: honing prepares rows in its own worker processes", "transform_num_workers"),
}

TRAINING: dict[str, Entry] = {
    **honoured("model.lora (with the peft section)", "use_peft"),
    **honoured(
        "method (TRL_SFT / OUMI / HF: sft or pretrain, TRL_DPO: dpo, TRL_GRPO / VERL_GRPO: grpo, ...)", "trainer_type"
    ),  # fmt: skip
    **honoured("parallel.activation_checkpointing: full", "enable_gradient_checkpointing"),
    **honoured("parallel.activation_checkpointing (use_reentrant noted)", "gradient_checkpointing_kwargs"),
    **honoured("trainer.save_folder", "output_dir"),
    **honoured("data.micro_batch_size and data.batch_size_per_rank", "per_device_train_batch_size"),
    **honoured("callbacks.evaluator.batch_size", "per_device_eval_batch_size"),
    **honoured("data.batch_size_per_rank (x per_device_train_batch_size)", "gradient_accumulation_steps"),
    **honoured("trainer.max_duration (Nsteps)", "max_steps"),
    **honoured("trainer.max_duration (Nepochs)", "num_train_epochs"),
    **honoured("callbacks.checkpointer.save_at_epoch_end", "save_epoch"),
    **honoured("callbacks.checkpointer.save_interval", "save_steps"),
    **honoured("trainer.seed", "seed"),
    **honoured("trainer.seed (refused when it differs from training.seed)", "data_seed"),
    **honoured("run_name", "run_name"),
    **honoured("grpo.rewards", "reward_functions"),
    **honoured("grpo.* (trainer_type TRL_GRPO)", "grpo"),
    **honoured("distill.* (trainer_type TRL_GKD)", "gkd"),
    **honoured("distill.* (trainer_type TRL_GOLD)", "gold"),
    **honoured("callbacks.wandb.enabled", "enable_wandb"),
    **honoured("callbacks.tensorboard.enabled", "enable_tensorboard"),
    **honoured("callbacks.console.log_interval (strategy 'steps'; 'no' / 'epoch': a note)", "logging_strategy"),
    **honoured("callbacks.console.log_interval", "logging_steps"),
    **honoured(
        "callbacks.evaluator.interval (strategy 'steps'; 'epoch': callbacks.evaluator.every_epoch; 'no': none)",
        "eval_strategy",
    ),
    **honoured("callbacks.evaluator.interval", "eval_steps"),
    **honoured("optim.lr", "learning_rate"),
    **honoured("scheduler.name (transformers' schedules, exactly)", "lr_scheduler_type"),
    **honoured("scheduler.kwargs", "lr_scheduler_kwargs"),
    **honoured_in("scheduler", "warmup_ratio", "warmup_steps"),
    **honoured("optim.name", "optimizer"),
    **honoured("optim.weight_decay", "weight_decay"),
    **honoured("optim.betas", "adam_beta1", "adam_beta2"),
    **honoured("optim.eps", "adam_epsilon"),
    **honoured("optim.momentum (optimizer sgd)", "sgd_momentum"),
    **honoured("trainer.precision (BF16: bf16-mixed, FP16: fp16-mixed)", "mixed_precision_dtype"),
    **honoured("parallel.compile", "compile"),
    **honoured("trainer.load_path (trainer.load_strategy: always)", "resume_from_checkpoint"),
    **honoured("trainer.load_strategy: if_available", "try_resume_from_last_checkpoint"),
    **honoured("data.num_workers ('auto': honing's default)", "dataloader_num_workers"),
    **honoured("optim.grad_clip", "max_grad_norm"),
    **honoured(
        "TRL's config keys honing has (max_length, beta, num_iterations, ...; the rest refused by name)",
        "trainer_kwargs",
    ),  # fmt: skip
    **honoured("verl's keys, each by verl_table (trainer_type VERL_GRPO)", "verl_config_overrides"),
    **honoured("callbacks.profiler (the schedule's active steps)", "profiler"),
    **honoured("parallel.timeout_seconds (x 60)", "nccl_default_timeout_minutes"),
    **moot("not needed: honing exports the final model (hf/) always; false is noted", "save_final_model"),
    **moot("not needed: honing's runs repeat for a seed; activation checkpointing then off", "use_deterministic"),
    **moot("not needed: honing's runs repeat for a seed (the same losses)", "full_determinism"),
    **moot("not needed: honing logs at INFO on rank 0 (Python's logging)", "log_level", "dep_log_level"),
    **moot("not needed: `honing data CONFIG` reports the rows as training sees them", "log_examples"),
    **moot("not needed: honing writes TensorBoard events under SAVE_FOLDER/tensorboard", "logging_dir"),
    **moot("not needed: honing always logs the first step", "logging_first_step"),
    **moot(
        "not needed: honing always logs throughput and MFU (callbacks.speed_monitor)",
        "include_performance_metrics",
        "include_alternative_mfu_metrics",
    ),  # fmt: skip
    **moot("not needed: honing logs the model's parameter counts at the start", "log_model_summary"),
    **moot(
        "not needed: loader processes only; the batches are the same",
        "dataloader_persistent_workers",
        "dataloader_prefetch_factor",
    ),  # fmt: skip
    **moot("not needed: each honing rank reads its own slice of every batch", "dataloader_main_process_only"),
    **moot("not needed: FSDP2 needs no such flag", "ddp_find_unused_parameters"),
    **moot("not needed: Oumi's own timers; honing's speed monitor logs step times (each key noted)", "telemetry"),
    **moot("not needed: it only hands cached device memory back; training is the same", "empty_device_cache_steps"),
    **moot("not needed: honing marks unlabelled positions itself (-100)", "label_ignore_index"),
    **refused("not available: honing evaluates the loss and its generation evals (callbacks.*)", "metrics_function"),
    **refused("not available: honing's rewards take their options from grpo.rewards", "reward_function_kwargs"),
    **refused("not available: honing logs to W&B, TensorBoard and metrics.jsonl", "enable_mlflow"),
}

GRPO: dict[str, Entry] = {
    **honoured("data.seq_len (max_prompt_length + max_completion_length)", "max_prompt_length"),
    **honoured_in(
        "grpo",
        "max_completion_length",
        "num_generations",
        "temperature",
        "use_vllm",
        "epsilon",
        "repetition_penalty",
    ),
    **honoured(
        "grpo.vllm_mode 'server'; 'colocate' (vLLM in the training process) is honing's own decoder in the training "
        "process (grpo.use_vllm: false), one note",
        "vllm_mode",
    ),
    **refused("not available: honing passes every column to the rewards (false)", "remove_unused_columns"),
    **moot(
        "not needed: a setting of the rollout server (serve.py --gpu-memory-utilization)", "vllm_gpu_memory_utilization"
    ),  # fmt: skip
    **moot(
        "not needed: completions and rewards go to samples.jsonl every grpo.sample_interval steps", "log_completions"
    ),  # fmt: skip
    **refused("not available: give honing's model.* keys", "model_init_kwargs"),
    **refused("not available: honing's rollouts are its own (grpo.tools for multi-turn)", "rollout_function"),
}

DISTILL_COMMON: dict[str, Entry] = {
    **honoured_in("distill", "teacher_model_name_or_path", "teacher_model_init_kwargs", "temperature", "lmbda", "beta"),
    **honoured("model.disable_dropout", "disable_dropout"),
    **honoured("distill.seq_kd", "seq_kd"),
}
# GOLD keys that only tune an engine honing does not use
GOLD_ENGINE_KEYS = (
    "use_transformers_paged",
    "use_vllm",
    "vllm_mode",
    "vllm_server_host",
    "vllm_server_port",
    "vllm_server_timeout",
    "vllm_gpu_memory_utilization",
    "vllm_tensor_parallel_size",
    "vllm_sync_frequency",
    "vllm_enable_sleep_mode",
)
GKD: dict[str, Entry] = {**DISTILL_COMMON, **honoured("distill.max_new_tokens", "max_new_tokens")}
GOLD: dict[str, Entry] = {
    **DISTILL_COMMON,
    **honoured_in("distill", "top_p", "top_k"),
    **honoured("distill.max_new_tokens", "max_completion_length"),
    **refused(
        "not available: GOLD's cross-tokenizer alignment (ULD); use a teacher with the student's tokenizer",
        "teacher_tokenizer_name_or_path",
    ),
    **honoured(
        "distill.loss: GOLD's generalized JSD with the student's tokenizer (false); true, ULD's cross-tokenizer loss, "
        "refused",
        "use_uld_loss",
    ),
    **moot(
        ULD,
        "use_extended_uld",
        "uld_use_hybrid_loss",
        "uld_hybrid_matched_weight",
        "uld_hybrid_unmatched_weight",
        "uld_crossentropy_weight",
        "uld_distillation_weight",
        "uld_student_temperature",
        "uld_teacher_temperature",
        "uld_skip_student_eos",
        "uld_skip_teacher_eos",
    ),  # fmt: skip
    **moot(OWN_DECODER, *GOLD_ENGINE_KEYS),
    **refused("not available: honing's decoder samples without structured outputs", "vllm_guided_decoding_regex"),
}

PROFILER: dict[str, Entry] = {
    **honoured(
        "callbacks.profiler.enabled (with schedule.enable_schedule)", "enable_cpu_profiling", "enable_cuda_profiling"
    ),  # fmt: skip
    **honoured("callbacks.profiler.start / stop", "schedule"),
    **moot("not needed: honing writes the trace to SAVE_FOLDER/profiler", "save_dir"),
    **moot(
        "not recorded: honing's trace holds op and kernel times; training is the same",
        "record_shapes",
        "profile_memory",
        "with_stack",
        "with_flops",
        "with_modules",
    ),  # fmt: skip
    **moot("not needed: honing writes the trace, not a printed table of the top ops", "row_limit"),
}
SCHEDULE: dict[str, Entry] = {
    **honoured("callbacks.profiler.enabled", "enable_schedule"),
    **honoured("callbacks.profiler.start (skip_first + wait + warmup + 1)", "skip_first", "wait", "warmup"),
    **honoured("callbacks.profiler.stop (start + active - 1)", "active"),
    **honoured("one window (callbacks.profiler.start..stop): other than 1 refused", "repeat"),
}
TELEMETRY: dict[str, Entry] = moot(
    "not needed: Oumi's own timers; honing logs step times and throughput (callbacks.speed_monitor)",
    "telemetry_dir", "collect_telemetry_for_all_ranks", "track_gpu_temperature",
)  # fmt: skip

PEFT: dict[str, Entry] = {
    **honoured("model.lora.rank", "lora_r"),
    **honoured("model.lora.alpha", "lora_alpha"),
    **honoured("model.lora.dropout", "lora_dropout"),
    **honoured("model.lora.target_modules", "lora_target_modules"),
    **honoured("model.lora.exclude_modules (with lora_target_modules)", "lora_exclude_modules"),
    **honoured("model.lora.modules_to_save", "lora_modules_to_save"),
    **honoured("model.lora.bias", "lora_bias"),
    **honoured("model.lora (peft's default initialisation; others refused)", "lora_init_weights"),
    **honoured("model.lora.task_type", "lora_task_type"),
    **honoured("model.quantize: fp4 (Oumi's default 4-bit code)", "q_lora"),
    **honoured("model.quantize (4: nf4 / fp4, 8: int8)", "q_lora_bits"),
    **honoured("model.quantize: nf4 / fp4 (with q_lora)", "bnb_4bit_quant_type"),
    **moot(UNUSED_Q, "use_bnb_nested_quant", "bnb_4bit_quant_storage", "bnb_4bit_compute_dtype"),
    **honoured("model.lora.target_parameters (MoE experts held as one tensor)", "lora_target_parameters"),
    **honoured("model.quantize_skip_modules (with q_lora)", "llm_int8_skip_modules"),
    **honoured("the adapter/ and merged hf/ exports (ADAPTER_ONLY, MERGED; others refused)", "peft_save_mode"),
}

FSDP: dict[str, Entry] = {
    **honoured("parallel.strategy: fsdp", "enable_fsdp"),
    **honoured("parallel.strategy / reshard_after_forward", "sharding_strategy"),
    **honoured("parallel.offload: params", "cpu_offload"),
    **honoured("parallel.mixed_precision and trainer.precision", "mixed_precision"),
    **moot(
        "not needed: honing's FSDP2 prefetches the next block's gather itself", "backward_prefetch", "forward_prefetch"
    ),  # fmt: skip
    **moot("not needed: FSDP2 keeps the original parameters (as DTensors)", "use_orig_params"),
    **moot("not needed: honing's checkpoints are sharded, hf/ is whole", "state_dict_type"),
    **moot(WRAPS, "auto_wrap_policy", "min_num_params", "transformer_layer_cls"),
    **moot("not needed: every rank loads the same weights", "sync_module_states"),
}

DEEPSPEED: dict[str, Entry] = {
    **honoured("parallel.strategy (ZeRO 0: ddp, 1-3: fsdp)", "enable_deepspeed", "zero_stage"),
    **honoured("parallel.offload: optimizer", "offload_optimizer"),
    **honoured("parallel.offload: params", "offload_param"),
    **honoured("parallel.mixed_precision and trainer.precision", "precision"),
    **refused("not available: a DeepSpeed JSON file; give its settings as deepspeed.* keys", "deepspeed_config_path"),
    **refused("not available: give it as training.per_device_train_batch_size x gradient_accumulation_steps",
              "train_batch_size"),  # fmt: skip
    **refused("not available: give it as training.per_device_train_batch_size", "train_micro_batch_size_per_gpu"),
    **refused("not available: give it as training.gradient_accumulation_steps", "gradient_accumulation_steps"),
    **refused("not available: give it as training.max_grad_norm", "gradient_clipping"),
    **refused("not available: set training.enable_gradient_checkpointing (whole blocks)", "activation_checkpointing"),
    **moot(OWN_ENGINE, "overlap_comm", "contiguous_gradients", "reduce_bucket_size", "allgather_bucket_size",
           "allgather_partitions", "reduce_scatter", "round_robin_gradients", "stage3_prefetch_bucket_size",
           "stage3_param_persistence_threshold", "stage3_max_live_parameters", "stage3_max_reuse_distance",
           "stage3_gather_16bit_weights_on_model_save", "sub_group_size", "zero_allow_untested_optimizer",
           "zero_force_ds_cpu_optimizer", "memory_efficient_linear", "steps_per_print", "wall_clock_breakdown"),
}  # fmt: skip
OFFLOAD: dict[str, Entry] = {
    **honoured("parallel.offload (cpu; nvme refused)", "device"),
    **moot("not needed: DeepSpeed's offload tuning (pinned buffers, NVMe queues); honing's host offload has none",
           "pin_memory", "buffer_count", "buffer_count_nvme", "block_size", "queue_depth", "single_submit",
           "overlap_events", "thread_count"),
}  # fmt: skip

TABLE: dict[str, dict[str, Entry]] = {
    "": TOP,
    "model": MODEL,
    "data": DATA,
    "data.<split>": SPLIT,
    "data.<split>.datasets[]": DATASET,
    "training": TRAINING,
    "training.grpo": GRPO,
    "training.gkd": GKD,
    "training.gold": GOLD,
    "training.profiler": PROFILER,
    "training.profiler.schedule": SCHEDULE,
    "training.telemetry": TELEMETRY,
    "peft": PEFT,
    "fsdp": FSDP,
    "deepspeed": DEEPSPEED,
    "deepspeed.offload_optimizer": OFFLOAD,
    "deepspeed.offload_param": OFFLOAD,
}
