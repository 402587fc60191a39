"""Every key of verl's PPO trainer config (``schema_keys/verl.json``: the leaves of
``_generated_ppo_trainer.yaml`` as dotted keys) with its verdict, as Oumi's ``VERL_GRPO`` passes them in
``training.verl_config_overrides``: honoured (the honing key it becomes), moot (why honing needs no such setting: a
note when set) or refused (why, and what to give instead: one line when set). A key's row is its own (``ROWS``) or
its longest prefix's (``PREFIXES``); ``verl.py`` reads the honoured keys and ``walk`` answers for the rest.
``test_verl_schema_walk.py`` checks every key against the translation."""

from __future__ import annotations

from typing import Any

from honing.interop.configs.key_tables import key_table
from honing.interop.configs.schema_table import Entry, honoured, is_unset, moot, refused
from honing.interop.configs.translation import Translation

SOURCE, GROUPS = key_table("verl")
KEYS: dict[str, tuple[str, str]] = {
    f"{group}.{key}" if group else key: value for group, keys in GROUPS.items() for key, value in keys.items()
}
NOT_TRANSLATED = "not translated (honing's GRPO has no such setting)"
ENGINE = "not needed: a setting of verl's inference engine; honing samples in process or on its rollout server"
LAYOUT = "not needed: how verl's workers place and shard the model; honing's parallel.* keys decide"
PROFILE = "not needed: verl's profiler tooling; honing's trace is callbacks.profiler"
RAY = "not needed: verl's Ray cluster; honing runs under torchrun"
CRITIC = "not needed: verl builds a critic only for adv_estimator gae (PPO); GRPO has none"
REWARD_MODEL = "not needed while reward_model.enable is false (verl's default); rewards are grpo.rewards"
REFERENCE = "not needed: honing's reference is a frozen copy of the policy, placed and scored as it is"
KL_REWARD = "not available: a KL penalty in the reward; give actor.use_kl_loss (grpo.beta, grpo.kl_estimator)"

ROWS: dict[str, Entry] = {
    # the rows verl.py translates
    **honoured("data.global_batch_size", "data.train_batch_size"),
    **honoured("grpo.max_completion_length", "data.max_response_length"),
    **honoured("data.seq_len (max_prompt_length + max_completion_length)", "data.max_prompt_length"),
    **honoured("data.train.sources (verl's Parquet rows)", "data.train_files"),
    **honoured("data.validation.sources (verl's Parquet rows)", "data.val_files"),
    **honoured("callbacks.evaluator.batch_size", "data.val_batch_size"),
    **moot(
        "not needed: honing drops every prompt that leaves fewer than max_completion_length tokens of seq_len "
        "(false refused)",
        "data.filter_overlong_prompts",
    ),  # fmt: skip
    **refused("not available: honing reads image prompts from the 'images' column", "data.image_key"),
    **honoured("grpo.num_generations", "actor_rollout_ref.rollout.n"),
    **honoured("grpo.temperature", "actor_rollout_ref.rollout.temperature"),
    **honoured("grpo.top_p", "actor_rollout_ref.rollout.top_p"),
    **honoured("grpo.top_k (-1: 0)", "actor_rollout_ref.rollout.top_k"),
    **honoured("honing's own sampling ('hf'; others refused)", "actor_rollout_ref.rollout.name"),
    **honoured("grpo.validation.num_generations", "actor_rollout_ref.rollout.val_kwargs.n"),
    **honoured("grpo.validation.temperature", "actor_rollout_ref.rollout.val_kwargs.temperature"),
    **honoured("grpo.validation.top_p", "actor_rollout_ref.rollout.val_kwargs.top_p"),
    **honoured("grpo.validation.top_k (-1: 0)", "actor_rollout_ref.rollout.val_kwargs.top_k"),
    **honoured("grpo.validation.temperature (false: 0, greedy)", "actor_rollout_ref.rollout.val_kwargs.do_sample"),
    **honoured("optim.lr", "actor_rollout_ref.actor.optim.lr"),
    **honoured("grpo.epsilon", "actor_rollout_ref.actor.clip_ratio", "actor_rollout_ref.actor.clip_ratio_low"),
    **honoured("grpo.epsilon_high", "actor_rollout_ref.actor.clip_ratio_high"),
    **honoured("grpo.beta (use_kl_loss)", "actor_rollout_ref.actor.kl_loss_coef"),
    **honoured("grpo.beta (false: 0) and grpo.kl_estimator", "actor_rollout_ref.actor.use_kl_loss"),
    **honoured("grpo.kl_estimator (with use_kl_loss)", "actor_rollout_ref.actor.kl_loss_type"),
    **honoured("grpo.num_iterations", "actor_rollout_ref.actor.ppo_epochs"),
    **honoured(
        "grpo.steps_per_generation (train_batch_size / ppo_mini_batch_size)",
        "actor_rollout_ref.actor.ppo_mini_batch_size",
    ),  # fmt: skip
    **honoured(
        "data.micro_batch_size (completions / rollout.n; else grpo.micro_batch_completions)",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    ),
    **honoured(
        "grpo.loss_type (token-mean: dapo, seq-mean-token-mean: grpo, seq-mean-token-sum-norm: dr_grpo)",
        "actor_rollout_ref.actor.loss_agg_mode",
    ),  # fmt: skip
    **honoured("method grpo ('grpo'; others refused)", "algorithm.adv_estimator"),
    **honoured("grpo.scale_rewards (group / none)", "algorithm.norm_adv_by_std_in_grpo"),
    **honoured(
        "parallel.activation_checkpointing (true: full)", "actor_rollout_ref.model.enable_gradient_checkpointing"
    ),
    **honoured("trainer.max_duration (Nsteps)", "trainer.total_training_steps"),
    **honoured("trainer.max_duration (Nepochs)", "trainer.total_epochs"),
    **honoured("callbacks.checkpointer.save_interval", "trainer.save_freq"),
    **honoured("trainer.save_folder", "trainer.default_local_dir"),
    **honoured("run_name", "trainer.experiment_name"),
    **honoured("callbacks.wandb.project", "trainer.project_name"),
    **honoured("callbacks.evaluator.interval (-1: the last step only)", "trainer.test_freq"),
    **honoured("grpo.validation.before_training", "trainer.val_before_train"),
    **honoured("callbacks.wandb.enabled / callbacks.tensorboard.enabled", "trainer.logger"),
    **moot(
        "not needed: a speed setting of verl's forward; the losses are the same",
        "actor_rollout_ref.model.use_remove_padding",
    ),
    **moot(
        "not needed: honing scores log-probs in micro-batches of data.micro_batch_size prompts",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
    ),  # fmt: skip
    # refused with what to give instead
    # verl_model_optim.py: the model, tokenizer, LoRA, optimizer, schedule, resume and seed keys
    **honoured("model.name_or_path", "actor_rollout_ref.model.path"),
    **honoured(
        "tokenizer.path (tokenizer.kind pretrained)", "actor_rollout_ref.model.tokenizer_path", "data.tokenizer"
    ),
    **honoured("model.trust_remote_code", "actor_rollout_ref.model.trust_remote_code", "data.trust_remote_code"),
    **honoured("data.chat_template", "actor_rollout_ref.model.custom_chat_template"),
    **honoured("model.config_overrides", "actor_rollout_ref.model.override_config"),
    **honoured("model.lora.rank (0: no LoRA)", "actor_rollout_ref.model.lora_rank"),
    **honoured("model.lora.alpha (with lora_rank)", "actor_rollout_ref.model.lora_alpha"),
    **honoured("model.lora.target_modules (with lora_rank)", "actor_rollout_ref.model.target_modules"),
    **refused(
        "not available: honing's LoRA targets target_modules; it excludes none",
        "actor_rollout_ref.model.exclude_modules",
    ),
    **refused(
        "not available: training on from a LoRA adapter's folder; give trainer.load_path (a honing checkpoint)",
        "actor_rollout_ref.model.lora_adapter_path",
    ),
    **refused(
        "not available: honing reads the model's config from model.path (or model.config_overrides)",
        "actor_rollout_ref.model.hf_config_path",
    ),
    **honoured(
        "trainer.load_strategy (auto: if_available, disable: never, resume_path: always)", "trainer.resume_mode"
    ),
    **honoured("trainer.load_path (resume_mode resume_path)", "trainer.resume_from_path"),
    **honoured("optim.weight_decay", "actor_rollout_ref.actor.optim.weight_decay"),
    **honoured("optim.betas", "actor_rollout_ref.actor.optim.betas"),
    **honoured("optim.grad_clip", "actor_rollout_ref.actor.optim.clip_grad", "actor_rollout_ref.actor.grad_clip"),
    **honoured(
        "scheduler.warmup_steps (transformers' schedule; < 0: int(ratio x steps))",
        "actor_rollout_ref.actor.optim.lr_warmup_steps",
        "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio",
    ),
    **honoured(
        "scheduler.name (constant: constant_with_warmup, cosine: cosine / cosine_with_min_lr)",
        "actor_rollout_ref.actor.optim.lr_scheduler_type",
        "actor_rollout_ref.actor.optim.warmup_style",
    ),
    **honoured(
        "scheduler.kwargs (num_cycles, min_lr_rate; lr_scheduler_type cosine)",
        "actor_rollout_ref.actor.optim.min_lr_ratio",
        "actor_rollout_ref.actor.optim.num_cycles",
    ),
    **honoured(
        "optim.name (AdamW: adamw, SGD: sgd with momentum 0; others refused)", "actor_rollout_ref.actor.optim.optimizer"
    ),  # fmt: skip
    **honoured(
        "optim.eps / betas / weight_decay / momentum (other arguments refused)",
        "actor_rollout_ref.actor.optim.override_optimizer_config",
    ),
    **refused(
        "not available: honing builds torch.optim's optimizers (8-bit states: optim.state_dtype int8)",
        "actor_rollout_ref.actor.optim.optimizer_impl",
    ),
    **honoured("trainer.seed (honing's one seed orders the data)", "data.seed"),
    **moot(
        "not needed: the seed of verl's actor-side shuffle of a rollout batch (actor.shuffle); honing's order follows "
        "trainer.seed",
        "actor_rollout_ref.actor.data_loader_seed",
    ),
    **honoured("data.shuffle", "data.shuffle"),
    **honoured("callbacks.checkpointer.keep_last", "trainer.max_actor_ckpt_to_keep"),
    **honoured("model.freeze_vision (image prompts)", "actor_rollout_ref.actor.freeze_vision_tower"),
    # verl.py: the policy loss, multi-turn limits and the reward function
    **honoured(
        "grpo.loss_type / importance_sampling_level (vanilla; gspo: grpo + sequence_token; sapo: sapo)",
        "actor_rollout_ref.actor.policy_loss.loss_mode",
    ),  # fmt: skip
    **honoured("grpo.sapo_temperature_pos (loss_mode sapo)", "actor_rollout_ref.actor.tau_pos"),
    **honoured("grpo.sapo_temperature_neg (loss_mode sapo)", "actor_rollout_ref.actor.tau_neg"),
    **moot(
        "not needed: read by policy_loss.loss_mode clip_cov / kl_cov only (refused)",
        "actor_rollout_ref.actor.policy_loss.clip_cov_ratio",
        "actor_rollout_ref.actor.policy_loss.clip_cov_lb",
        "actor_rollout_ref.actor.policy_loss.clip_cov_ub",
        "actor_rollout_ref.actor.policy_loss.kl_cov_ratio",
        "actor_rollout_ref.actor.policy_loss.ppo_kl_coef",
    ),
    **honoured("grpo.max_turns (with grpo.tools)", "actor_rollout_ref.rollout.multi_turn.max_assistant_turns"),
    **honoured(
        "grpo.max_tool_response_length (with grpo.tools)",
        "actor_rollout_ref.rollout.multi_turn.max_tool_response_length",
    ),
    **honoured("grpo.tool_call_format (hermes; others refused)", "actor_rollout_ref.rollout.multi_turn.format"),
    **moot(
        "not needed: a check of verl's SGLang rollout that its tokenization matches; honing tokenizes once",
        "actor_rollout_ref.rollout.multi_turn.tokenization_sanity_check_mode",
    ),
    **moot(
        f"not needed: declared by verl's RolloutConfig but read nowhere in verl ({SOURCE})",
        "actor_rollout_ref.rollout.multi_turn.num_repeat_rollouts",
    ),
    **moot(RAY, "actor_rollout_ref.rollout.agent.num_workers"),
    **honoured(
        "grpo.rewards (verl:module:name, verl's signature; path pkg://module or a .py under the working directory)",
        "custom_reward_function.path",
    ),
    **honoured("grpo.rewards (with custom_reward_function.path)", "custom_reward_function.name"),
    # a switch refused below leaves its parameters unread: moot while it is off
    **moot(
        "not needed: read with algorithm.use_kl_in_reward only (refused)",
        "algorithm.kl_penalty",
        "algorithm.kl_ctrl.type",
        "algorithm.kl_ctrl.kl_coef",
        "algorithm.kl_ctrl.horizon",
        "algorithm.kl_ctrl.target_kl",
    ),
    **moot(
        "not needed: read with algorithm.rollout_correction.rollout_is only (refused)",
        "algorithm.rollout_correction.rollout_is_threshold",
        "algorithm.rollout_correction.rollout_is_batch_normalize",
    ),
    **moot(
        "not needed: read with algorithm.rollout_correction.rollout_rs only (refused)",
        "algorithm.rollout_correction.rollout_rs_threshold",
    ),
    **moot(
        "not needed: read with algorithm.rollout_correction.bypass_mode only (refused)",
        "algorithm.rollout_correction.loss_type",
    ),
    **moot(
        "not needed: read with algorithm.use_pf_ppo only (refused)",
        "algorithm.pf_ppo.reweight_method",
        "algorithm.pf_ppo.weight_pow",
    ),
    **moot(
        "not needed: read with actor.router_replay.mode other than disabled only (refused)",
        "actor_rollout_ref.actor.router_replay.record_file",
        "actor_rollout_ref.actor.router_replay.replay_file",
    ),
    **moot(
        "not needed: read with model.mtp.enable_train only (refused)",
        "actor_rollout_ref.model.mtp.detach_encoder",
        "actor_rollout_ref.model.mtp.mtp_loss_scaling_factor",
    ),
    **moot(
        "not needed: speculative decoding in verl's vLLM / SGLang rollout with the MTP heads; the samples' "
        "distribution is the policy's either way",
        "actor_rollout_ref.model.mtp.enable_rollout",
        "actor_rollout_ref.model.mtp.speculative_algorithm",
        "actor_rollout_ref.model.mtp.speculative_num_steps",
        "actor_rollout_ref.model.mtp.speculative_eagle_topk",
        "actor_rollout_ref.model.mtp.speculative_num_draft_tokens",
        "actor_rollout_ref.model.mtp.method",
        "actor_rollout_ref.model.mtp.num_speculative_tokens",
    ),
    **refused(
        "not available: honing reads the prompt from the row's 'prompt' column (verl's default)", "data.prompt_key"
    ),
    **refused(
        "not available: honing reads all of a split's rows; give data.*.datasets[].sample_count",
        "data.train_max_samples",
        "data.val_max_samples",
    ),
    **refused(
        "not available: honing scores each completion with grpo.rewards (verl's naive reward manager)",
        "reward_manager.source",
        "reward_manager.name",
        "reward_manager.module.path",
        "reward_manager.module.name",
        "data.reward_fn_key",
    ),
    **refused("not available: a reward model scoring rollouts; give grpo.rewards", "reward_model.enable"),
    **refused("not available: the entropy bonus; honing's GRPO loss has none", "actor_rollout_ref.actor.entropy_coeff"),
    **refused(
        "not available: verl's dual-clip bound; honing's GRPO clips with epsilon / epsilon_high",
        "actor_rollout_ref.actor.clip_ratio_c",
    ),
    **refused(KL_REWARD, "algorithm.use_kl_in_reward"),
    **refused(
        "not available: multi-turn rollouts through verl's tool config; give grpo.tools", "data.tool_config_path"
    ),
    **moot(
        "not needed: honing trains on the machine's CUDA devices, else its CPU; the maths is the same", "trainer.device"
    ),  # fmt: skip
    **refused("not available: honing does not stop after validation; run `honing eval` instead", "trainer.val_only"),
    **refused(
        "not available: the rows to train on are the ones the loader gives (no custom sampler or class)",
        "data.custom_cls.path",
        "data.custom_cls.name",
        "data.sampler.class_path",
        "data.sampler.class_name",
        "data.datagen.path",
        "data.datagen.name",
    ),
    **refused(
        "not available: honing renders prompts without extra chat template arguments", "data.apply_chat_template_kwargs"
    ),
    **refused(
        "not available: a prompt longer than seq_len is dropped ('error' / 'left' / 'right' / 'middle' are verl's)",
        "data.truncation",
    ),
    **refused(
        "not available: honing samples with temperature, top_p and top_k",
        "actor_rollout_ref.rollout.ignore_eos",
        "actor_rollout_ref.rollout.do_sample",
        "actor_rollout_ref.rollout.over_sample_rate",
    ),
    **refused("not available: honing samples the same n for every prompt", "actor_rollout_ref.actor.rollout_n"),
    **refused(
        "not available: honing scales the loss by its own normalisation (grpo.loss_type)",
        "actor_rollout_ref.actor.loss_scale_factor",
    ),
    **moot(
        "not needed: completions per forward over all of verl's GPUs (deprecated; the per-GPU one is translated): "
        "verl's update is the same for any micro-batch (losses normalised over the mini-batch)",
        "actor_rollout_ref.actor.ppo_micro_batch_size",
    ),
    **honoured(
        "data.seq_len (as data.max_prompt_length when that is not given)", "actor_rollout_ref.rollout.prompt_length"
    ),  # fmt: skip
    **honoured(
        "grpo.max_completion_length (the rollout's; wins over data.max_response_length)",
        "actor_rollout_ref.rollout.response_length",
    ),  # fmt: skip
    # moot one by one
    **moot("not needed: honing trains every rank on its slice of one batch", "trainer.balance_batch"),
    **moot("not needed: honing takes the processes from torchrun", "trainer.nnodes", "trainer.n_gpus_per_node"),
    **moot(
        "not needed: honing writes sampled completions to samples.jsonl",
        "trainer.log_val_generations",
        "trainer.rollout_data_dir",
        "trainer.validation_data_dir",
    ),
    **moot(
        "not needed: honing checkpoints locally or to any fsspec URL (trainer.save_folder)",
        "trainer.default_hdfs_dir",
        "trainer.del_local_ckpt_after_load",
        "trainer.esi_redundant_time",
        "trainer.max_critic_ckpt_to_keep",
    ),
    **moot(CRITIC, "trainer.critic_warmup", "algorithm.gamma", "algorithm.lam"),
    **moot(
        RAY,
        "trainer.ray_wait_register_center_timeout",
        "trainer.use_legacy_worker_impl",
        "actor_rollout_ref.hybrid_engine",
        "actor_rollout_ref.nccl_timeout",
    ),
    **moot(
        "not needed: honing's loader (data.num_workers) reads the rows",
        "data.dataloader_num_workers",
        "data.use_shm",
        "actor_rollout_ref.model.use_shm",
        "data.filter_overlong_prompts_workers",
        "data.validation_shuffle",
        "actor_rollout_ref.actor.shuffle",
    ),
    **moot(
        "not needed: honing's rows hold what its GRPO reads",
        "data.return_raw_input_ids",
        "data.return_raw_chat",
        "data.return_full_prompt",
        "data.return_multi_modal_inputs",
        "data.image_patch_size",
        "data.video_key",
    ),
    **moot(
        "not needed: honing's chunked loss never holds the full logits",
        "actor_rollout_ref.model.use_liger",
        "actor_rollout_ref.model.use_fused_kernels",
        "actor_rollout_ref.actor.use_fused_kernels",
        "actor_rollout_ref.model.fused_kernel_options.impl_backend",
    ),
    **moot("not needed: honing loads the model's own code from transformers", "actor_rollout_ref.model.external_lib"),
}

# a key without a row of its own: its longest prefix's row
PREFIXES: dict[str, Entry] = {
    **moot(CRITIC, "critic."),
    **moot(REWARD_MODEL, "reward_model."),
    **moot(
        PROFILE,
        "global_profiler.",
        "actor_rollout_ref.actor.profiler.",
        "actor_rollout_ref.rollout.profiler.",
        "actor_rollout_ref.rollout.trace.",
    ),
    **moot(REFERENCE, "actor_rollout_ref.ref."),
    **moot(RAY, "ray_kwargs.", "transfer_queue."),
    **moot(LAYOUT, "actor_rollout_ref.actor.", "actor_rollout_ref.actor.fsdp_config."),
    **moot(
        "not needed: honing's checkpoints hold the model, optimizer and loader state, written with "
        "torch.distributed.checkpoint",
        "actor_rollout_ref.actor.checkpoint.",
    ),
    **moot(ENGINE, "actor_rollout_ref.rollout."),
    **refused(
        "not available: verl's multi-turn rollouts; give grpo.tools and grpo.max_turns",
        "actor_rollout_ref.rollout.multi_turn.",
    ),
    **refused("not available: verl's agent loops; give grpo.tools", "actor_rollout_ref.rollout.agent."),
    **refused("not available: multi-token prediction heads (loaded, saved or trained)", "actor_rollout_ref.model.mtp."),
    **moot("not needed: a memory setting of verl's MLP; the maths is the same", "actor_rollout_ref.model.tiled_mlp."),
    **moot(
        "not needed: where verl keeps activations (host memory); the maths is the same",
        "actor_rollout_ref.model.enable_activation_offload",
    ),
    **refused(
        "not available: MoE router replay (the rollout's expert choices replayed in training)",
        "actor_rollout_ref.actor.router_replay.",
    ),
    **refused(
        "not available: importance weights or rejection of rollouts by rollout vs. training log-probs (not built)",
        "algorithm.rollout_correction.",
    ),
    **refused(KL_REWARD, "algorithm.kl_ctrl."),
    **refused("not available: PF-PPO's reweighting of rollouts", "algorithm.pf_ppo.", "algorithm.use_pf_ppo"),
}

# keys Oumi's own VERL_GRPO configs set that verl's schema has under actor.fsdp_config (which they set too)
OFFLOAD = ("not needed: not a key of verl's actor config (its fsdp_config.{} is, set beside it in Oumi's files): "
           "where verl's FSDP workers keep weights or optimizer state; the maths is the same")  # fmt: skip
OUTSIDE_THE_SCHEMA = {
    "actor_rollout_ref.actor.param_offload": OFFLOAD.format("param_offload"),
    "actor_rollout_ref.actor.optimizer_offload": OFFLOAD.format("optimizer_offload"),
}


def row(key: str) -> Entry:
    """A verl key's verdict: its own row, or its longest prefix's."""
    if key in ROWS:
        return ROWS[key]
    prefix = max((prefix for prefix in PREFIXES if key.startswith(prefix)), key=len)
    return PREFIXES[prefix]


TABLE: dict[str, Entry] = {key: row(key) for key in KEYS}


def walk(t: Translation, full: str, key: str, value: Any) -> None:
    """A verl key ``verl.py`` did not take: nothing at verl's default, a note (moot), a refusal (refused, honoured
    with a value verl.py does not read, or a key verl's config does not have)."""
    parent = next((name for name in KEYS if key.startswith(f"{name}.") and KEYS[name][0] == "dict"), None)
    if key not in KEYS and parent is not None:  # an entry of a mapping-valued key (override_config, engine_kwargs)
        full, key, value = full[: len(full) - len(key) + len(parent)], parent, {key[len(parent) + 1 :]: value}
    if key in OUTSIDE_THE_SCHEMA:
        t.note(full, OUTSIDE_THE_SCHEMA[key])
        return
    if key not in KEYS:
        t.refuse(full, f"{value!r}: not a key of verl's ppo_trainer.yaml ({SOURCE}); check its spelling")
        return
    verdict, why = TABLE[key]
    if verdict != "honoured" and is_unset(value, KEYS[key][1]):  # a honoured key here: a value verl.py cannot read
        return  # (adv_estimator gae: verl's default, not Oumi's VERL_GRPO's)
    if verdict == "moot":
        t.note(full, why)
    else:
        t.refuse(full, f"{value!r}: {why if verdict == 'refused' else NOT_TRANSLATED}")
