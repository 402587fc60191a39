"""Every key of axolotl's config schema (``key_table("axolotl")``) with its verdict: honoured by a honing feature (what
it becomes), moot (why honing needs no such setting) or refused (why it cannot be honoured). ``axolotl.py`` reads
the honoured keys; ``schema_table.finish`` notes or refuses the rest. ``test_foreign_schema_walk.py`` checks that
every key of the schema is here and nothing else is."""

from __future__ import annotations

from honing.interop.configs import axolotl_reasons as why
from honing.interop.configs.axolotl_nested_table import DATASET, PLUGINS, PRETRAINING_DATASET, TRL
from honing.interop.configs.schema_table import Entry, honoured, honoured_in, moot, refused

TOP: dict[str, Entry] = {
    # the model
    **honoured("model.name_or_path", "base_model"),
    **honoured("tokenizer.kind: pretrained, tokenizer.path", "tokenizer_config"),
    **honoured("model.trust_remote_code", "trust_remote_code"),
    **honoured("model.pretrained_weights: false", "reinit_weights"),
    **honoured("model.config_overrides", "model_config", "rope_scaling"),
    **honoured("model.load_kwargs (but for arguments honing sets from its own keys)", "model_kwargs"),
    **moot("not needed: honing loads any causal LM with AutoModelForCausalLM", "model_type", "tokenizer_type"),
    **moot("not needed: honing loads the model's fast tokenizer", "tokenizer_use_fast", "tokenizer_legacy"),
    **moot(
        "not needed: honing reads the family from the model's config",
        "is_falcon_derived_model",
        "is_llama_derived_model",
        "is_mistral_derived_model",
        "is_qwen_derived_model",
    ),  # fmt: skip
    **refused(
        "not translated: honing loads the model's own config (model.config overrides keys of it)",
        "base_model_config",
        "cls_model_config",
    ),  # fmt: skip
    **refused("not available: honing loads the hub's default revision", "model_revision"),
    **refused("not available: honing loads Hugging Face tokenizers", "tokenizer_use_mistral_common"),
    **refused(
        "not translated: honing builds the processor of the model (vl_sft)", "processor_type", "processor_kwargs"
    ),  # fmt: skip
    **moot(why.EXPORT, "tokenizer_save_jinja_files", "save_safetensors"),
    **honoured(
        "tokenizer.special_tokens (bos / eos / unk / pad; additional_special_tokens to added_tokens)", "special_tokens"
    ),  # fmt: skip
    **honoured("tokenizer.added_tokens", "tokens"),
    **refused(
        why.TOKENS,
        "added_tokens_overrides",
        "resize_token_embeddings_to_32x",
        "mean_resizing_embeddings",
        "shrink_embeddings",
        "fix_untrained_tokens",
    ),  # fmt: skip
    **moot(
        "not needed: honing moves the model to its device itself",
        "experimental_skip_move_to_device",
        "low_cpu_mem_usage",
    ),  # fmt: skip
    **refused("not available: honing uses transformers' models as they are (no hub kernels)", "use_kernels"),
    **refused(
        why.QUANT,
        "model_quantization_config",
        "model_quantization_config_kwargs",
        "use_onebitllms",
        "gptq",
        "bnb_config_kwargs",
        "quantize_moe_experts",
        "qat",
        "quantization",
        "fp8",
        "fp8_enable_fsdp_float8_all_gather",
    ),  # fmt: skip
    **refused(
        "not available: honing places the model by its parallel settings",
        "device_map",
        "max_memory",
        "gpu_memory_limit",
        "device",
    ),  # fmt: skip
    # LoRA
    **honoured(
        "model.lora (rank, alpha, dropout, targets); qlora also model.quantize: nf4",
        "adapter",
        "lora_r",
        "lora_alpha",
        "lora_dropout",
        "lora_target_modules",
        "lora_target_linear",
        "lora_modules_to_save",
        "peft",
    ),  # fmt: skip
    **honoured("model.quantize: nf4 (QLoRA) / int8", "load_in_4bit", "load_in_8bit"),
    **refused(
        "not available: honing's LoRA is peft's plain LoRA",
        "peft_use_dora",
        "peft_use_rslora",
        "lora_rank_pattern",
        "lora_alpha_pattern",
        "peft_layers_to_transform",
        "peft_layers_pattern",
        "peft_layer_replication",
        "peft_trainable_token_indices",
        "lora_target_parameters",
        "loraplus_lr_ratio",
        "relora",
        "lora_fan_in_fan_out",
    ),  # fmt: skip
    **moot("not needed: honing initialises adapters as peft does by default", "peft_init_lora_weights"),
    **moot(
        "not needed: honing's exports keep the model's tied weights as the base has them", "peft_ensure_weight_tying"
    ),  # fmt: skip
    **moot(
        "not needed: honing computes adapters in the run's precision (trainer.precision)",
        "peft_autocast_adapter_dtype",
        "embeddings_skip_upcast",
    ),  # fmt: skip
    **moot("unused without loraplus_lr_ratio", "loraplus_lr_embedding"),
    **moot("unused without relora", "relora_prune_ratio", "relora_prune_method", "relora_cpu_offload"),
    **refused(
        "not available: honing starts LoRA from fresh adapters (load a full checkpoint with trainer.load_path)",
        "lora_model_dir",
    ),  # fmt: skip
    **moot(why.EXPORT, "merge_lora", "merge_method", "lora_on_cpu"),
    **moot("not needed: honing loads a QLoRA base and shards it with FSDP2 as it is", "qlora_sharded_model_loading"),
    **refused(
        "not available: honing's LoRA kernels are peft's",
        "lora_mlp_kernel",
        "lora_qkv_kernel",
        "lora_o_kernel",
        "lora_embedding_kernel",
    ),  # fmt: skip
    # the method
    **honoured("method: dpo / orpo / cpo (simpo) / kto / grpo", "rl"),
    **honoured("method: reward", "reward_model"),
    **honoured("the method's beta (dpo.beta, orpo.beta, cpo.beta, kto.beta, grpo.beta)", "rl_beta", "dpo_beta"),
    **honoured("dpo.label_smoothing", "dpo_label_smoothing"),
    **honoured("dpo.loss_type (a name, or a list summed by dpo.loss_weights)", "dpo_loss_type"),
    **honoured("dpo.loss_weights", "dpo_loss_weights"),
    **honoured("dpo.use_weighting", "dpo_use_weighting"),
    **honoured("dpo.rpo_alpha", "rpo_alpha"),
    **honoured("orpo.beta (ORPO's lambda)", "orpo_alpha"),
    **honoured_in("cpo", "simpo_gamma", "cpo_alpha"),
    **honoured("kto.desirable_weight / kto.undesirable_weight", "kto_desirable_weight", "kto_undesirable_weight"),
    **honoured("dpo.reference: precompute", "precompute_ref_log_probs"),
    **honoured("grpo.* (TRL's GRPO keys)", "trl"),
    **moot(why.KERNEL, "dpo_use_liger_kernel"),
    **moot("not needed: honing packs a pair's two sequences without padding (dpo.packed_pairs)", "dpo_padding_free"),
    **moot("not needed: honing computes log-probabilities of the completions only", "dpo_use_logits_to_keep"),
    **refused("not available: honing's DPO loss sums, it is not length-normalised (use rl: simpo)", "dpo_norm_loss"),
    **moot(why.GENERATION, "dpo_generate_during_eval"),
    **refused(why.NO_METHOD, "process_reward_model", "ebft", "trainer_cls", "lisa_n_layers", "lisa_step_interval"),
    **moot("unused without lisa_n_layers", "lisa_layers_attribute"),
    **refused("not available: honing's reward model has no mean-zero penalty", "center_rewards_coefficient"),
    **refused("not available: honing's reward head scores with one label", "num_labels"),
    **refused(
        "not available: honing samples GRPO completions with its own decoder or a vLLM rollout server "
        "(grpo.use_vllm); give grpo.* keys",
        "vllm",
    ),  # fmt: skip
    # data
    **honoured("data.train.sources", "datasets"),
    **honoured("data.validation.sources", "test_datasets"),
    **honoured("method: pretrain, data.train.sources", "pretraining_dataset"),
    **honoured("data.validation_split", "val_set_size"),
    **honoured("data.seq_len", "sequence_len"),
    **honoured("data.packing", "sample_packing"),
    **honoured("data.overlong (drop / truncate)", "excess_length_strategy"),
    **honoured("data.chat_template", "chat_template", "chat_template_jinja"),
    **honoured("data.train_on (all / assistant)", "train_on_inputs"),
    **honoured("data.group_by_length", "group_by_length"),
    **honoured("data.num_workers", "dataloader_num_workers"),
    **moot(
        why.PREPROCESS,
        "dataset_prepared_path",
        "skip_prepare_dataset",
        "num_dataset_shards_to_save",
        "dataset_processes",
        "dataset_num_proc",
        "dataset_keep_in_memory",
        "is_preprocess",
        "preprocess_iterable",
        "push_dataset_to_hub",
    ),  # fmt: skip
    **moot(why.LOADER, "dataloader_pin_memory", "dataloader_prefetch_factor"),
    **refused("not available: honing's loader batches an epoch's last rows itself", "dataloader_drop_last"),
    **moot(
        "not needed: a packed row is filled to data.seq_len; padded rows are cut to the longest of the batch",
        "pad_to_sequence_len",
        "pad_to_multiple_of",
        "sample_packing_group_size",
        "sample_packing_bin_size",
        "sample_packing_sequentially",
        "sample_packing_mp_start_method",
        "multipack_real_batches",
        "batch_flattening",
        "pretrain_multipack_buffer_size",
        "pretrain_multipack_attn",
        "pretraining_sample_concatenation",
        "streaming_multipack_buffer_size",
    ),  # fmt: skip
    **moot("honing packs validation rows as it packs training rows (data.packing)", "eval_sample_packing"),
    **moot("not needed: honing's evaluation rows are cut to data.seq_len as training's", "eval_sequence_len"),
    **refused("not available: every non-empty example is trained; filter the data first", "min_sample_len"),
    **refused(
        "not available: honing cuts a pair's prompt from its start so the pair fits data.seq_len", "max_prompt_len"
    ),  # fmt: skip
    **refused(
        "not available: honing's loader shuffles every epoch by trainer.seed (data.shuffle)",
        "shuffle_merged_datasets",
        "shuffle_before_merging_datasets",
        "curriculum_sampling",
    ),  # fmt: skip
    **refused(
        "not available: honing reads whole sources (a source's max_samples reads its first rows)",
        "dataset_shard_num",
        "dataset_shard_idx",
    ),  # fmt: skip
    **refused("not available: give a held-out file as data.validation", "dataset_exact_deduplication"),
    **moot(
        "not needed: honing reads sources whole (its prepare streams large corpora into token shards)", "streaming"
    ),  # fmt: skip
    **refused(
        "not available: honing's positions are the row's own (no PoSE)",
        "use_pose",
        "pose_split_on_token_ids",
        "pose_max_context_len",
        "pose_num_chunks",
    ),  # fmt: skip
    **refused(
        "not available: honing renders the chat template without extra keyword arguments", "chat_template_kwargs"
    ),  # fmt: skip
    **refused("not available: honing ends turns as the chat template does", "eot_tokens"),
    **refused("not available: give the system message in the rows", "default_system_message"),
    **moot("not needed: honing's rows keep the columns their method reads", "remove_unused_columns"),
    **refused(
        "not available: honing trains text models and image-text models through their processor; "
        "give data.min_pixels / max_pixels",
        "image_size",
        "image_resize_algorithm",
        "role_boundaries",
    ),  # fmt: skip
    **refused(
        "not available: honing freezes by model.freeze_layers / freeze_vision",
        "freeze_mm_modules",
        "unfrozen_parameters",
    ),  # fmt: skip
    # batch, duration, optimizer, schedule
    **honoured("data.micro_batch_size", "micro_batch_size"),
    **honoured(
        "data.batch_size_per_rank (micro_batch_size x gradient_accumulation_steps)",
        "gradient_accumulation_steps",
        "batch_size",
    ),  # fmt: skip
    **honoured("callbacks.evaluator.batch_size", "eval_batch_size"),
    **honoured("trainer.max_duration (epochs, a fraction too, or max_steps)", "num_epochs", "max_steps"),
    **honoured("optim.lr", "learning_rate"),
    **honoured("optim.weight_decay", "weight_decay"),
    **honoured("optim.name (AdamW, SGD, Adafactor, Muon; 8-bit AdamW states)", "optimizer"),
    **honoured("optim.betas / optim.eps", "adam_beta1", "adam_beta2", "adam_epsilon"),
    **honoured("optim.grad_clip", "max_grad_norm"),
    **honoured(
        "scheduler.name / kwargs (transformers' schedules, step for step)", "lr_scheduler", "lr_scheduler_kwargs"
    ),
    **honoured("scheduler.name: cosine_with_min_lr, kwargs.min_lr_rate", "cosine_min_lr_ratio"),
    **honoured("scheduler.warmup_steps / warmup_ratio", "warmup_steps", "warmup_ratio"),
    **honoured("optim.param_groups (the embeddings' learning rate)", "embedding_lr", "embedding_lr_scale"),
    **refused("not translated: give honing's optim.param_groups", "lr_groups"),
    **refused(
        "not available: honing's schedules are transformers' own and constant, linear, cosine and wsd",
        "lr_quadratic_warmup",
        "cosine_constant_lr_ratio",
        "lr_div_factor",
        "jagged_restart_steps",
        "jagged_restart_warmup_steps",
        "jagged_restart_anneal_steps",
    ),  # fmt: skip
    **refused(
        why.NO_OPTIMIZER,
        "optim_args",
        "optim_target_modules",
        "torchdistx_path",
        "adam_epsilon2",
        "adam_beta3",
        "dion_lr",
        "dion_momentum",
    ),  # fmt: skip
    **moot("unused without a Dion optimizer", "dion_rank_fraction", "dion_rank_multiple_of"),
    **moot(
        "unused without a Q-GaLore optimizer",
        "qgalore_rank",
        "qgalore_update_proj_gap",
        "qgalore_scale",
        "qgalore_proj_type",
        "qgalore_proj_quant",
        "qgalore_proj_bits",
        "qgalore_proj_group_size",
        "qgalore_cos_threshold",
        "qgalore_gamma_proj",
        "qgalore_queue_size",
    ),  # fmt: skip
    **refused("not available: honing's batch sizes are given, not searched", "auto_find_batch_size"),
    **refused("not available: honing trains on every position of a row (no NEFTune noise)", "noisy_embedding_alpha"),
    **honoured("sft.neftune_noise_alpha, where honing has it", "neftune_noise_alpha"),
    **refused(
        "not available: honing's loss is cross-entropy on the labels",
        "use_eaft",
        "eaft_alpha",
        "eaft_k",
        "scaling_softmax",
        "scaling_softmax_factor",
        "scaling_softmax_bias",
    ),  # fmt: skip
    # precision, memory, compile, attention
    **honoured("trainer.precision (bf16: auto / true)", "bf16", "bfloat16"),
    **honoured("trainer.precision: fp16-mixed where honing has it", "fp16", "float16"),
    **honoured("trainer.precision: fp32", "float32"),
    **moot("not needed: torch's TF32 matmul setting; honing leaves it as PyTorch sets it", "tf32"),
    **honoured("parallel.activation_checkpointing: full", "gradient_checkpointing", "gradient_checkpointing_kwargs"),
    **refused("not available: honing checkpoints whole blocks", "selective_checkpointing"),
    **honoured("parallel.activation_offload", "activation_offloading"),
    **refused(
        "not available: honing offloads activations (parallel.activation_offload) or the optimizer / weights "
        "(parallel.offload), not layers",
        "layer_offloading",
    ),  # fmt: skip
    **honoured(
        "model.attn_implementation",
        "flash_attention",
        "sdp_attention",
        "flex_attention",
        "eager_attention",
        "attn_implementation",
    ),  # fmt: skip
    **refused(
        why.ATTENTION,
        "xformers_attention",
        "sage_attention",
        "flash_optimum",
        "s2_attention",
        "sdpa_varlen",
        "fused_attn_kernel",
        "large_head_attention",
        "flash_attn_d512",
        "gemma4_hybrid_attn_impl",
        "flash_attn_fuse_mlp",
        "flash_attn_rms_norm",
        "experts_implementation",
        "llama4_linearized_experts",
    ),  # fmt: skip
    **moot("not needed: honing compiles blocks with parallel.compile's own options", "flex_attn_compile_kwargs"),
    **moot(why.KERNEL, "flash_attn_cross_entropy", "chunked_cross_entropy", "chunked_cross_entropy_num_chunks"),
    **refused("not available: honing's MLPs run whole", "tiled_mlp", "tiled_mlp_num_shards"),
    **moot("unused without tiled_mlp", "tiled_mlp_use_original_mlp"),
    **honoured("parallel.compile", "torch_compile"),
    **refused(
        "not available: honing compiles with torch.compile's defaults (parallel.compile)",
        "torch_compile_backend",
        "torch_compile_mode",
        "torch_compile_options",
        "deepcompile",
    ),  # fmt: skip
    **refused("not available: honing keeps norms in the run's precision", "fp32_norms", "fp32_norm_classes"),
    # parallelism
    **honoured("parallel.* (ZeRO stage, offload, precision of the DeepSpeed JSON)", "deepspeed"),
    **honoured(
        "parallel.strategy: fsdp and its settings", "fsdp", "fsdp_config", "fsdp_version", "fsdp_final_state_dict_type"
    ),  # fmt: skip
    **honoured(
        "parallel.dp_shard / dp_replicate / cp / tp",
        "dp_shard_size",
        "dp_replicate_size",
        "sequence_parallel_degree",
        "context_parallel_size",
        "tensor_parallel_size",
    ),  # fmt: skip
    **refused(
        "not available: honing's context parallelism is torch's ring attention", "heads_k_stride", "ring_attn_func"
    ),  # fmt: skip
    **moot("not needed: torchrun sets the ranks (honing train --nproc N)", "world_size", "local_rank", "ddp"),
    **honoured("parallel.timeout_seconds", "ddp_timeout"),
    **moot(
        "not needed: FSDP2 (honing's default for several processes) needs no such setting",
        "ddp_bucket_cap_mb",
        "ddp_broadcast_buffers",
        "ddp_find_unused_parameters",
        "accelerator_config",
    ),  # fmt: skip
    **refused("not available: honing runs under torchrun, not Ray", "use_ray"),
    **moot("unused without use_ray", "ray_run_name", "ray_num_workers", "resources_per_worker"),
    # checkpoints, evaluation, logging
    **honoured("trainer.save_folder", "output_dir"),
    **honoured("trainer.seed", "seed"),
    **honoured("trainer.load_path / load_strategy", "resume_from_checkpoint", "auto_resume_from_checkpoints"),
    **honoured(
        "callbacks.checkpointer.save_interval / save_at_epoch_end", "save_steps", "saves_per_epoch", "save_strategy"
    ),  # fmt: skip
    **honoured("callbacks.checkpointer.keep_last", "save_total_limit"),
    **honoured("callbacks.evaluator.interval / enabled", "eval_steps", "evals_per_epoch", "eval_strategy"),
    **honoured("callbacks.console.log_interval", "logging_steps"),
    **honoured(
        "callbacks.evaluator.metric_for_best_model / greater_is_better / load_best_model_at_end",
        "metric_for_best_model",
        "greater_is_better",
        "load_best_model_at_end",
    ),  # fmt: skip
    **honoured("callbacks.wandb.*", "use_wandb", "wandb_project", "wandb_entity", "wandb_name", "wandb_mode"),
    **honoured("callbacks.tensorboard.enabled", "use_tensorboard"),
    **honoured("callbacks.profiler", "profiler_steps", "profiler_steps_start"),
    **moot("honing logs the first step too", "save_first_step"),
    **moot(why.MODEL_AND_OPTIMIZER, "save_only_model"),
    **refused("not available: honing stops at trainer.max_duration (or trainer.hard_stop)", "early_stopping_patience"),
    **moot(
        "not needed: honing always logs throughput (callbacks.speed_monitor)",
        "include_tokens_per_second",
        "include_tkps",
    ),  # fmt: skip
    **honoured("callbacks.loss_watchdog.threshold", "loss_watchdog_threshold"),
    **honoured("callbacks.loss_watchdog.patience (with a threshold, as in axolotl)", "loss_watchdog_patience"),
    **moot(
        "not needed: honing's garbage collector callback runs every callbacks.garbage_collector.interval steps",
        "gc_steps",
        "torch_empty_cache_steps",
        "gc_collect_steps",
    ),  # fmt: skip
    **refused(
        "not available: honing evaluates the validation loss; give callbacks.harness_eval for benchmarks",
        "do_causal_lm_eval",
        "eval_causal_lm_metrics",
        "do_bench_eval",
        "bench_dataset",
        "bench_split",
    ),  # fmt: skip
    **moot("unused without the W&B tracker's extras", "wandb_run_id", "wandb_watch", "wandb_log_model"),
    **refused(why.TRACKER, "use_mlflow", "use_comet", "use_trackio", "use_otel_metrics"),
    **moot(
        "unused: honing has no such tracker",
        "mlflow_tracking_uri",
        "mlflow_experiment_name",
        "mlflow_run_name",
        "hf_mlflow_log_artifacts",
        "comet_api_key",
        "comet_workspace",
        "comet_project_name",
        "comet_experiment_key",
        "comet_mode",
        "comet_online",
        "comet_experiment_config",
        "trackio_project_name",
        "trackio_run_name",
        "trackio_space_id",
        "otel_metrics_host",
        "otel_metrics_port",
    ),  # fmt: skip
    **honoured("callbacks.hub.repo_id (axolotl pushes when it is set; a LoRA run's adapter)", "hub_model_id"),
    **honoured("callbacks.hub.strategy (every_save: the final export, noted)", "hub_strategy"),
    **honoured("callbacks.hub.revision", "hub_revision"),
    **moot("not needed: the environment's token (HF_TOKEN) is used", "hf_use_auth_token"),
    **refused(why.GENERATION, "generate_samples", "eval_table_size", "eval_max_new_tokens"),
    **moot(
        "unused without generate_samples",
        "num_generation_samples",
        "generation_max_new_tokens",
        "generation_temperature",
        "generation_top_p",
        "generation_top_k",
        "generation_prompt_ratio",
        "generation_do_sample",
    ),  # fmt: skip
    **refused(
        "not available: honing runs in-process, not behind a Gradio server",
        "gradio_title",
        "gradio_share",
        "gradio_server_name",
        "gradio_server_port",
        "gradio_max_new_tokens",
        "gradio_temperature",
    ),  # fmt: skip
    **refused("not available: honing stops and resumes by its cancel file and checkpoints", "dynamic_checkpoint"),
    **honoured("the plugins' keys: liger and cut_cross_entropy kernels are moot (honing's chunked loss)", "plugins"),
    **moot("not needed: honing's config is validated strictly always", "strict"),
    **moot(
        why.INTERNAL, "total_num_tokens", "total_supervised_tokens", "sample_packing_eff_est", "axolotl_config_path"
    ),
    **refused(why.DEPRECATED, "max_packed_sequence_len"),
    **honoured("the older name of eval_strategy, read as it (noted)", "evaluation_strategy"),
}

TABLE: dict[str, dict[str, Entry]] = {
    "": TOP,
    "datasets[]": DATASET,
    "pretraining_dataset[]": PRETRAINING_DATASET,
    "trl": TRL,
    "plugins": PLUGINS,
}
