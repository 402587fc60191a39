"""Every key of LLaMA-Factory's training arguments (``key_table("llamafactory")``: its model, data, fine-tuning,
generating and training dataclasses, the last over transformers' ``Seq2SeqTrainingArguments``, all read from one
flat YAML) and of ``dataset_info.json``, with its verdict: honoured (what it becomes), moot or refused (why).
``llamafactory.py`` and ``llamafactory_data.py`` read the honoured keys; ``schema_table.finish`` the rest."""

from __future__ import annotations

from honing.interop.configs.hf_training_args_table import TRAINING_ARGUMENTS
from honing.interop.configs.key_tables import key_table
from honing.interop.configs.llamafactory_dataset_table import COLUMNS, DATASET_INFO, TAGS
from honing.interop.configs.schema_table import Entry, honoured, moot, refused

KEYS = key_table("llamafactory").keys

OWN_LOOP = "not needed: honing runs its own loop, not the transformers Trainer this setting tunes"
INFERENCE = "not needed for training: an inference engine's setting (honing generate / chat have their own)"
EXPORT = "not needed: honing exports hf/ (merged when LoRA, safetensors) and adapter/ at the end of every run"
NO_OPTIMIZER = "not available: honing's optimizers are AdamW, SGD, Adafactor and Muon (optim.name)"
TRACKER = "not available: honing logs to W&B, TensorBoard and metrics.jsonl"
HUB = "not available in a training config: `honing push SAVE_FOLDER/hf REPO` uploads a finished model"
PREPROCESS = "not needed: honing prepares rows once into its cache (data.cache_dir) on the first run"
LOADER = "not needed: honing's loader (data.num_workers) reads and collates whole batches ahead of training"
TOKENS = "not available: honing trains with the tokenizer's own vocabulary"
NO_METHOD = "not available: honing has no such training method"
KERNEL = (
    "not needed: a fused kernel of the same maths; honing's chunked loss (model.chunked_loss) never holds full logits"
)
LOSS = "not available: honing's SFT loss is cross-entropy on the labels"
PROFILER = "honing's profiler: callbacks.profiler (start / stop steps), traces under the save folder"
GENERATION = "not needed for training: a sampling setting of prediction (honing generate has its own)"
UNUSED_EVAL = "not needed: honing evaluates the validation loss every callbacks.evaluator.interval steps"

# transformers' Seq2SeqTrainingArguments as LLaMA-Factory's pinned transformers declares them: the rows of TRL's
# TrainingArguments table (one verdict per key, read by the same translate_training / engine / outputs), with
# LLaMA-Factory's wording where TRL's names the defaults its classes fill in, and the keys that transformers had
HF_TRAINING: dict[str, Entry] = {
    **{key: entry for key, entry in TRAINING_ARGUMENTS.items() if key in KEYS["Seq2SeqTrainingArguments"]},
    **honoured(
        "data.micro_batch_size / batch_size_per_rank", "per_device_train_batch_size", "gradient_accumulation_steps"
    ),  # fmt: skip
    **honoured("trainer.max_duration", "num_train_epochs", "max_steps"),
    **honoured("optim.lr", "learning_rate"),
    **honoured("scheduler.*", "lr_scheduler_type", "warmup_ratio"),
    **honoured("optim.weight_decay / betas", "weight_decay", "adam_beta1", "adam_beta2"),
    **honoured("trainer.precision", "bf16"),
    **honoured("parallel.activation_checkpointing: full", "gradient_checkpointing"),
    **honoured("sft.neftune_noise_alpha, where honing has it", "neftune_noise_alpha"),
    **honoured("callbacks.console.log_interval", "logging_steps", "logging_strategy"),
    **honoured("trainer.seed", "seed"),
    **honoured("trainer.load_path", "resume_from_checkpoint"),
    **refused(LOSS, "label_smoothing_factor"),
    **moot("honing writes TensorBoard events under the save folder (SAVE_FOLDER/tensorboard)", "logging_dir"),
}

TRAIN: dict[str, Entry] = {
    # the model
    **honoured("model.name_or_path", "model_name_or_path"),
    **honoured("model.trust_remote_code", "trust_remote_code"),
    **honoured("model.pretrained_weights: false", "train_from_scratch"),
    **honoured("model.attn_implementation", "flash_attn"),
    **honoured(
        "model.quantize: nf4 / fp4 / int8 (QLoRA)",
        "quantization_bit",
        "quantization_method",
        "quantization_type",
        "double_quantization",
    ),  # fmt: skip
    **honoured("model.router_aux_loss_coef", "moe_aux_loss_coef"),
    **honoured("parallel.activation_checkpointing: none", "disable_gradient_checkpointing"),
    **honoured("data.min_pixels / max_pixels (vl_sft)", "image_max_pixels", "image_min_pixels"),
    **moot("not needed: honing's activation checkpointing is always non-reentrant", "use_reentrant_gc"),
    **moot("not needed: honing loads the model's fast tokenizer", "use_fast_tokenizer"),
    **moot("not needed: honing reads from the Hugging Face cache ($HF_HOME)", "cache_dir"),
    **moot("not needed: the environment's tokens (HF_TOKEN) are used", "hf_hub_token", "ms_hub_token", "om_hub_token"),
    **moot(
        "not needed: honing moves the model to its device itself", "low_cpu_mem_usage", "offload_folder"
    ),  # fmt: skip
    **moot("not needed: honing logs the model's parameter counts at the start", "print_param_status"),
    **refused(
        "not available: honing starts LoRA from fresh adapters (load a full checkpoint with trainer.load_path)",
        "adapter_name_or_path",
        "adapter_folder",
        "create_new_adapter",
    ),  # fmt: skip
    **refused(
        TOKENS,
        "resize_vocab",
        "split_special_tokens",
        "add_tokens",
        "add_special_tokens",
        "new_special_tokens_config",
        "init_special_tokens",
    ),  # fmt: skip
    **refused("not available: honing loads the hub's default revision", "model_revision"),
    **refused("not available: honing's RoPE is the model config's", "rope_scaling"),
    **refused(
        "not available: honing uses transformers' models as they are",
        "shift_attn",
        "mixture_of_depths",
        "use_unsloth",
        "use_unsloth_gc",
        "use_v1_kernels",
        "upcast_layernorm",
        "upcast_lmhead_output",
    ),  # fmt: skip
    **moot(KERNEL, "enable_liger_kernel", "use_liger_kernel", "liger_kernel_config"),
    **moot(
        INFERENCE,
        "infer_backend",
        "use_kv_cache",
        "infer_dtype",
        "vllm_maxlen",
        "vllm_gpu_util",
        "vllm_enforce_eager",
        "vllm_max_lora_rank",
        "vllm_config",
        "sglang_maxlen",
        "sglang_mem_fraction",
        "sglang_tp_size",
        "sglang_config",
        "sglang_lora_backend",
        "use_cache",
    ),  # fmt: skip
    **refused(
        "not available: honing's QLoRA base is quantized on the fly (bitsandbytes-style NF4 / int8)",
        "quantization_device_map",
    ),  # fmt: skip
    **refused(
        "not available: honing passes images to the processor whole (no pan-and-scan or patch crops)",
        "image_do_pan_and_scan",
        "crop_to_patches",
    ),  # fmt: skip
    **moot(
        "unused: honing's rows carry images only (a videos / audios column is refused)",
        "video_max_pixels",
        "video_min_pixels",
        "video_fps",
        "video_maxlen",
        "use_audio_in_video",
        "audio_sampling_rate",
    ),  # fmt: skip
    **moot(EXPORT, "export_dir", "export_size", "export_device", "export_legacy_format"),
    **refused(
        "not available: honing exports unquantized weights",
        "export_quantization_bit",
        "export_quantization_dataset",
        "export_quantization_nsamples",
        "export_quantization_maxlen",
    ),  # fmt: skip
    **refused(HUB, "export_hub_model_id"),
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
    **refused("not available: honing runs no KTransformers", "use_kt"),
    **moot(
        "unused without use_kt",
        "kt_cpu_activation",
        "kt_weight_path",
        "kt_non_expert_weight_path",
        "kt_expert_checkpoint_path",
        "kt_use_lora_experts",
        "kt_lora_expert_num",
        "kt_lora_expert_intermediate_size",
    ),  # fmt: skip
    # the data
    **honoured("data.chat_template (the tokenizer's own for a model's template)", "template"),
    **honoured("data.train.sources through dataset_info.json", "dataset", "dataset_dir"),
    **honoured("the mllm rows' image folder: beside the data file, as dataset_dir", "media_dir"),
    **honoured("data.validation.sources through dataset_info.json", "eval_dataset"),
    **honoured("data.seq_len", "cutoff_len"),
    **honoured("data.train_on: all", "train_on_prompt"),
    **honoured("data.packing (always within-example attention)", "packing", "neat_packing"),
    **honoured("data.validation_split", "val_size"),
    **honoured("each source's max_samples", "max_samples"),
    **honoured("data.num_workers", "dataloader_num_workers"),
    **honoured("data.shuffle: false", "disable_shuffling"),
    **honoured("data.<split>.mixture.stop", "mix_strategy"),
    **honoured("data.<split>.sources[].proportion", "interleave_probs"),
    **moot(
        PREPROCESS,
        "overwrite_cache",
        "preprocessing_batch_size",
        "preprocessing_num_workers",
        "tokenized_path",
        "data_shared_file_system",
    ),  # fmt: skip
    **moot(
        "not needed: honing reads sources whole (its prepare streams large corpora into token shards)",
        "streaming",
        "buffer_size",
    ),  # fmt: skip
    **moot("not needed: honing masks padding by position", "ignore_pad_token_for_loss"),
    **refused("not available: honing trains on every assistant turn", "mask_history"),
    **refused("not available: honing renders tools as the chat template does", "tool_format"),
    **refused("not available: give the system message in the rows", "default_system"),
    **refused(
        "not available: honing renders reasoning as the chat template does", "enable_thinking", "preserve_thinking"
    ),  # fmt: skip
    **refused(
        "not available: honing reports one validation loss per validation source (data.validation.sources)",
        "eval_on_each_dataset",
    ),  # fmt: skip
    **moot(
        GENERATION,
        "eval_num_beams",
        "do_sample",
        "temperature",
        "top_p",
        "top_k",
        "num_beams",
        "max_length",
        "max_new_tokens",
        "repetition_penalty",
        "length_penalty",
        "skip_special_tokens",
        "predict_with_generate",
        "generation_max_length",
        "generation_num_beams",
        "generation_config",
        "sortish_sampler",
    ),  # fmt: skip
    # the method and its adapters
    **honoured("method: pretrain / sft / reward / dpo / orpo / cpo / kto", "stage", "pref_loss"),
    **honoured("model.lora for lora (LLaMA-Factory's default); every weight for full", "finetuning_type"),
    **honoured(
        "model.lora (rank, alpha, dropout, targets)",
        "lora_rank",
        "lora_alpha",
        "lora_dropout",
        "lora_target",
        "additional_target",
    ),  # fmt: skip
    **moot(
        "unused without finetuning_type: freeze (which honing refuses)",
        "freeze_trainable_layers",
        "freeze_trainable_modules",
        "freeze_extra_modules",
    ),  # fmt: skip
    **honoured("the method's beta (dpo.beta, orpo.beta, cpo.beta, kto.beta)", "pref_beta"),
    **honoured("dpo.rpo_alpha (the SFT loss on the chosen reply)", "pref_ftx"),
    **honoured("dpo.label_smoothing", "dpo_label_smoothing"),
    **honoured("kto.desirable_weight / undesirable_weight", "kto_chosen_weight", "kto_rejected_weight"),
    **honoured("cpo.simpo_gamma", "simpo_gamma"),
    **honoured(
        "model.freeze_vision / freeze_projector (vl_sft)", "freeze_vision_tower", "freeze_multi_modal_projector"
    ),  # fmt: skip
    **refused("not available: honing trains the language model", "freeze_language_model"),
    **refused(
        "not available: honing's LoRA is peft's plain LoRA",
        "use_rslora",
        "use_dora",
        "pissa_init",
        "pissa_convert",
        "loraplus_lr_ratio",
        "module_dropout",
        "oft_rank",
        "use_llama_pro",
    ),  # fmt: skip
    **moot("unused without pissa_init", "pissa_iter"),
    **moot("unused without loraplus_lr_ratio", "loraplus_lr_embedding"),
    **moot("unused without finetuning_type: oft", "oft_block_size", "oft_target"),
    **refused("not available: honing's DPO has no BCO term", "pref_bco_weight"),
    **refused(
        "not available: honing's reference is a copy of the model, or its base with adapters off",
        "ref_model",
        "ref_model_adapters",
        "ref_model_quantization_bit",
    ),  # fmt: skip
    **refused(
        "not available: honing has no PPO (its online method is GRPO)",
        "reward_model",
        "reward_model_adapters",
        "reward_model_quantization_bit",
        "ppo_buffer_size",
        "ppo_epochs",
        "ppo_score_norm",
        "ppo_target",
        "ppo_whiten_rewards",
    ),  # fmt: skip
    **moot("unused without stage: ppo", "reward_model_type"),
    **honoured("dpo.ld_alpha (LD-DPO; stage dpo with pref_loss sigmoid, hinge or ipo)", "ld_alpha"),
    **refused(NO_OPTIMIZER, "use_galore", "use_apollo", "use_badam", "use_adam_mini"),
    **honoured("optim.name: muon", "use_muon"),
    **moot(
        "unused without use_galore",
        "galore_target",
        "galore_rank",
        "galore_update_interval",
        "galore_scale",
        "galore_proj_type",
        "galore_layerwise",
    ),  # fmt: skip
    **moot(
        "unused without use_apollo",
        "apollo_target",
        "apollo_rank",
        "apollo_update_interval",
        "apollo_scale",
        "apollo_proj",
        "apollo_proj_type",
        "apollo_scale_type",
        "apollo_layerwise",
        "apollo_scale_front",
    ),  # fmt: skip
    **moot(
        "unused without use_badam",
        "badam_mode",
        "badam_start_block",
        "badam_switch_mode",
        "badam_switch_interval",
        "badam_update_ratio",
        "badam_mask_mode",
        "badam_verbose",
    ),  # fmt: skip
    **refused(TRACKER, "use_swanlab"),
    **moot(
        "unused without use_swanlab",
        "swanlab_project",
        "swanlab_workspace",
        "swanlab_run_name",
        "swanlab_mode",
        "swanlab_api_key",
        "swanlab_logdir",
        "swanlab_lark_webhook_url",
        "swanlab_lark_secret",
    ),  # fmt: skip
    **honoured("trainer.precision: bf16 (pure)", "pure_bf16"),
    **refused(
        "not available: honing runs its own FSDP2, not Megatron or HyperParallel",
        "use_mca",
        "use_megatron_bridge",
        "use_hyper_parallel",
        "hyper_parallel_args",
    ),  # fmt: skip
    **honoured("parallel.cp", "hyper_parallel_cp_size"),
    **refused(LOSS, "use_dft_loss", "use_asft_loss", "use_eaft_loss", "label_smoothing_factor"),
    **moot("unused without its loss", "asft_alpha", "eaft_alpha"),
    **moot("honing logs the token accuracy of validation rows where the method has one", "compute_accuracy"),
    **refused("not available: honing stops at trainer.max_duration (or trainer.hard_stop)", "early_stopping_steps"),
    **moot("honing plots a run's metrics with `honing plot SAVE_FOLDER`", "plot_loss"),
    **moot(
        "not needed: honing always logs throughput (callbacks.speed_monitor)",
        "include_effective_tokens_per_second",
        "include_num_input_tokens_seen",
    ),  # fmt: skip
    # LLaMA-Factory's training arguments beside transformers'
    **refused("not available: honing runs under torchrun, not Ray", "ray_num_workers", "ray_init_kwargs"),
    **moot(
        "not needed: torchrun sets the rendezvous (honing train --nproc N, or torchrun's own flags)",
        "master_addr",
        "master_port",
        "local_rank",
    ),  # fmt: skip
    **refused("not available: honing trains in fp32, bf16 or bf16-mixed", "fp8", "fp8_enable_fsdp_float8_all_gather"),
    **moot("unused without fp8", "fp8_backend"),
    **honoured(
        "callbacks.profiler",
        "enable_torch_profiler",
        "profiler_wait_steps",
        "profiler_warmup_steps",
        "profiler_active_steps",
    ),  # fmt: skip
    **moot(
        PROFILER,
        "profiler_output_dir",
        "profiler_repeat",
        "profiler_record_shapes",
        "profiler_profile_memory",
        "profiler_with_stack",
        "profile_modules",
    ),  # fmt: skip
    **honoured("trainer.save_overwrite", "overwrite_output_dir"),
    # transformers' Seq2SeqTrainingArguments: one table with TRL's (HF_TRAINING)
    **HF_TRAINING,
}

TABLE: dict[str, dict[str, Entry]] = {
    "": TRAIN,
    "dataset_info": DATASET_INFO,
    "dataset_info.columns": COLUMNS,
    "dataset_info.tags": TAGS,
}
