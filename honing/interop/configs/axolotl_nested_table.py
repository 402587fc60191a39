"""The verdicts of axolotl's nested schemas (a ``datasets`` entry, a ``pretraining_dataset`` entry, the ``trl``
section, the liger / cut-cross-entropy plugin keys); ``axolotl_table.TABLE`` gathers them with the top level's."""

from __future__ import annotations

from honing.interop.configs.axolotl_reasons import KERNEL, NO_METHOD
from honing.interop.configs.schema_table import Entry, honoured, honoured_in, moot, refused

DATASET: dict[str, Entry] = {
    **honoured("the source's path (a file, folder or hub name)", "path", "data_files"),
    **honoured("the source's format (alpaca, chat_template, completion, sharegpt, preference types)", "type"),
    **honoured("a hub source's split (path:split)", "split"),
    **honoured("the source's subset", "name"),
    **honoured("the source's text_field", "field"),
    **honoured(
        "conversation (messages) or sharegpt (conversations), other names as the source's columns",
        "field_messages",
        "message_property_mappings",
        "message_field_role",
        "message_field_content",
    ),  # fmt: skip
    **honoured("data.chat_template", "chat_template", "chat_template_jinja"),
    **honoured("data.train_on (roles trained: the assistant's or every one)", "roles_to_train"),
    **honoured("preference pairs' chosen / rejected columns (the source's columns)", "field_chosen", "field_rejected"),
    **moot("the tokenizer and data are read with model.trust_remote_code", "trust_remote_code"),
    **moot("not needed: honing reads the file's format from its name (json, jsonl, parquet, csv)", "ds_type"),
    **moot("not needed: a conversation ends its turns as the chat template does", "train_on_eos", "train_on_eot"),
    **refused("not available: honing's rows keep the tools column 'tools'", "field_tools"),
    **honoured("the source's roles (chat_template rows)", "roles"),
    **refused(
        "not available: honing trains on every assistant turn of a row",
        "message_field_training",
        "message_field_training_detail",
    ),  # fmt: skip
    **refused("not available: honing keeps a row's system message", "drop_system_message"),
    **refused(
        "not available: honing renders reasoning as the chat template does",
        "field_thinking",
        "template_thinking_key",
        "split_thinking",
    ),  # fmt: skip
    **refused(
        "not available: honing distils from a teacher model (method: distill), not stored log-probabilities",
        "logprobs_field",
        "temperature",
    ),  # fmt: skip
    **refused("not available: honing reads whole sources", "shards", "shards_idx", "preprocess_shards"),
    **refused(
        "not available: give the rows in a format honing reads",
        "input_transform",
        "input_format",
        "conversation",
        "field_human",
        "field_model",
    ),  # fmt: skip
    **refused("not available: honing reads the hub's default revision", "revision"),
    **refused(NO_METHOD, "step_separator", "train_on_last_step_only"),
    **refused("not available: give grpo.max_completion_length", "max_completion_length"),
}

PRETRAINING_DATASET: dict[str, Entry] = {
    **honoured("the source's path", "path", "data_files"),
    **honoured("a hub source's subset and split", "name", "split"),
    **honoured("the source's text_field", "text_column"),
    **honoured("pretraining documents (type: pretrain)", "type"),
    **moot("the tokenizer and data are read with model.trust_remote_code", "trust_remote_code"),
    **refused("not available: honing reads a source from its first row", "skip"),
}

TRL: dict[str, Entry] = {
    **honoured("the method's beta", "beta"),
    **honoured_in("grpo", "max_completion_length", "num_generations"),
    **honoured("grpo.temperature / top_p / top_k", "temperature", "top_p", "top_k"),
    **honoured_in("grpo", "min_p", "repetition_penalty"),
    **honoured("grpo.epsilon / epsilon_high", "epsilon", "epsilon_high"),
    **honoured_in("grpo", "loss_type", "num_iterations", "scale_rewards", "importance_sampling_level"),
    **honoured("grpo.rewards (name, weight)", "reward_funcs", "reward_weights"),
    **honoured(
        "grpo.use_vllm / vllm_mode / vllm_server_*",
        "use_vllm",
        "vllm_mode",
        "vllm_server_host",
        "vllm_server_port",
        "vllm_server_timeout",
    ),  # fmt: skip
    **honoured("grpo.sample_interval (completions logged to samples.jsonl)", "log_completions"),
    **moot("honing logs every sampled completion to samples.jsonl", "num_completions_to_print"),
    **refused(
        "not available: honing samples with temperature, top_p, top_k, min_p and repetition_penalty",
        "generation_kwargs",
        "vllm_guided_decoding_regex",
    ),  # fmt: skip
    **refused("not available: honing's reference model is fixed", "sync_ref_model"),
    **moot("unused without sync_ref_model", "ref_model_mixup_alpha", "ref_model_sync_steps"),
    **refused(
        "not available: honing samples one batch of prompts per step",
        "generation_batch_size",
        "use_data_producer",
        "async_prefetch",
        "prefetch_depth",
        "streaming_partial_batch",
        "streaming_min_groups",
        "replay_buffer_size",
        "reroll_start_fraction",
        "reroll_max_groups",
    ),  # fmt: skip
    **moot("unused without a replay buffer", "replay_recompute_logps"),
    **refused("not available: honing renders prompts without extra chat template arguments", "chat_template_kwargs"),
    **moot(KERNEL, "use_liger_loss"),
    **refused("not available: truncated completions are trained as sampled", "mask_truncated_completions"),
    **moot(
        "not needed: a setting of the vLLM server honing's rollout server starts itself",
        "vllm_enable_sleep_mode",
        "vllm_lora_sync",
        "vllm_sync_interval",
    ),  # fmt: skip
    **refused("not available: honing's rollouts are its own (grpo.tools for multi-turn)", "rollout_func"),
    **refused("not available: honing sums weighted rewards", "multi_objective_aggregation"),
    **refused(
        "not available: honing's GRPO has no importance-sampling correction of vLLM's samples",
        "vllm_importance_sampling_correction",
        "vllm_importance_sampling_mode",
        "vllm_importance_sampling_cap",
        "off_policy_mask_threshold",
        "use_bias_correction_kl",
    ),  # fmt: skip
    **moot("not needed: honing's rewards run in the training process", "reward_num_workers"),
    **moot(
        "not needed: honing's filter_groups (grpo.filter_groups) drops zero-advantage groups when asked",
        "skip_zero_advantage_batches",
    ),  # fmt: skip
}

PLUGINS: dict[str, Entry] = {
    **moot(KERNEL, "cut_cross_entropy", "liger_cross_entropy", "liger_fused_linear_cross_entropy"),
    **moot(
        "not needed: a fused kernel of the same layer; honing runs transformers' own",
        "liger_rope",
        "liger_rms_norm",
        "liger_rms_norm_gated",
        "liger_layer_norm",
        "liger_swiglu",
        "liger_glu_activation",
    ),  # fmt: skip
    **refused("not available: honing's loss is cross-entropy on the labels", "liger_use_token_scaling"),
}
