"""The verdicts of the fields TRL's online configs add to ``TrainingArguments``: ``GRPOConfig`` (as ``grpo.*``) and
``RLOOConfig`` (as ``rloo.*``) (``key_table("trl").keys[class]``). ``trl_args.py`` reads the honoured ones."""

from __future__ import annotations

from honing.interop.configs.axolotl_reasons import HUB, KERNEL
from honing.interop.configs.schema_table import Entry, honoured, honoured_in, moot, refused
from honing.interop.configs.trl_common_table import DROPOUT, LOADING, NO_ROUTER, NOT_SFT, PAD, REFERENCE_SYNC

VLLM_SERVER = "not needed: a setting of the vLLM server honing's rollout server starts itself (serve.py's flags)"
ENGINE = (
    "not needed: how transformers' generate holds its KV cache or batches requests changes speed, not what is "
    "sampled; honing samples with its own KV-cached decoder or the rollout server (use_vllm)"
)
LOGGED = "not needed: completions and rewards go to samples.jsonl every sample_interval steps"
# GRPOConfig's loss keys beside the clipping range, each grpo.<key>
GRPO_LOSS_KEYS = ("delta", "sapo_temperature_neg", "sapo_temperature_pos", "vespo_k_pos", "vespo_lambda_pos",
                  "vespo_k_neg", "vespo_lambda_neg", "multi_objective_aggregation", "top_entropy_quantile")  # fmt: skip
# GRPOConfig's entropy bonus (TRL's _compute_loss; honing.methods.grpo_entropy_bonus), each grpo.<key>
ENTROPY_KEYS = ("entropy_coef", "use_adaptive_entropy", "entropy_coef_min", "entropy_coef_max", "entropy_coef_delta",
                "entropy_target")  # fmt: skip
# the keys GRPOConfig and RLOOConfig share, each becoming <section>.<key> where honoured
SAME_NAME = ("num_generations", "max_completion_length", "temperature", "top_p", "top_k", "min_p", "repetition_penalty",
             "beta", "epsilon", "epsilon_high", "num_iterations", "steps_per_generation", "use_vllm", "vllm_mode",
             "vllm_server_base_url", "vllm_server_host", "vllm_server_port", "vllm_server_timeout")  # fmt: skip


def shared(section: str) -> dict[str, Entry]:
    """The rows GRPOConfig and RLOOConfig share, honoured keys becoming ``section``'s."""
    rows: dict[str, Entry] = {key: ("honoured", f"{section}.{key}") for key in SAME_NAME}
    rows["max_completion_length"] = ("honoured", f"{section}.max_completion_length (TRL's default 512 filled in)")
    rows["vllm_mode"] = (
        "honoured",
        f"{section}.vllm_mode 'server'; 'colocate' (TRL's default with use_vllm: vLLM in the training process) is "
        f"honing's own decoder in the training process ({section}.use_vllm: false), one note",
    )
    rows["steps_per_generation"] = (
        "honoured",
        f"{section}.steps_per_generation (TRL's counts per-device batches: it / gradient_accumulation_steps; the "
        "batch in prompts per rank and max_steps in rollout batches, honing.interop.configs.trl_grpo_batch)",
    )
    return {
        **NOT_SFT,
        **LOADING,
        **NO_ROUTER,
        **DROPOUT,
        **PAD,
        **REFERENCE_SYNC,
        **rows,
        **honoured(
            f"{section}.steps_per_generation: generation_batch_size / (per_device_train_batch_size x processes) "
            "per-device batches, as GRPOConfig sets it, where the file gives num_processes (trl's CLI file); "
            "without it, or where TRL raises (not divisible; beside steps_per_generation), refused in one line",
            "generation_batch_size",
        ),  # fmt: skip
        **moot("not needed: honing's loader shuffles the prompts each epoch (data.shuffle)", "shuffle_dataset"),
        **moot("not needed: honing's sampling runs outside DeepSpeed", "ds3_gather_for_generation"),
        **honoured(
            f"{section}.validation.num_generations, the held-out prompts sampled with the training's temperature, "
            "top_p, top_k, min_p and repetition_penalty (TRL's eval)",
            "num_generations_eval",
        ),  # fmt: skip
        **honoured(
            f"{section}.temperature / top_p / top_k / min_p / repetition_penalty / max_completion_length "
            "(max_new_tokens, max_tokens), overriding the class's keys as in TRL; do_sample false and other keys "
            "refused by name",
            "generation_kwargs",
        ),  # fmt: skip
        **moot(ENGINE, "cache_implementation"),
        **honoured(
            "data.chat_template_kwargs (a JSON string read as TRL reads it), given at every rendering of the run",
            "chat_template_kwargs",
        ),
        **moot(
            VLLM_SERVER,
            "vllm_model_impl",
            "vllm_enable_sleep_mode",
            "vllm_group_port",
            "vllm_gpu_memory_utilization",
            "vllm_max_model_length",
            "vllm_tensor_parallel_size",
        ),  # fmt: skip
        **refused(
            "not available: honing's rollout server samples without structured outputs", "vllm_structured_outputs_regex"
        ),  # fmt: skip
        **honoured(f"{section}.reward_weights (one per reward of {section}.rewards)", "reward_weights"),
        **honoured(f"{section}.mask_truncated_completions", "mask_truncated_completions"),
        **moot(LOGGED, "log_completions", "num_completions_to_print", "log_unique_prompts"),
        **moot("not needed: honing logs no images of multimodal rollouts", "log_multimodal"),
        **moot(
            ENGINE,
            "use_transformers_continuous_batching",
            "transformers_continuous_batching_config",
            "use_transformers_paged",
        ),  # fmt: skip
    }


GRPO: dict[str, Entry] = {
    **shared("grpo"),
    **moot(KERNEL, "cast_lm_head_to_fp32"),
    **{key: ("honoured", f"grpo.{key}") for key in GRPO_LOSS_KEYS},
    **honoured("grpo.importance_sampling_level", "importance_sampling_level"),
    **honoured("grpo.scale_rewards (true: 'group', false: 'none')", "scale_rewards"),
    **honoured("grpo.loss_type (grpo, bnpo, dr_grpo, dapo, cispo, sapo, luspo, vespo)", "loss_type"),
    **{key: ("honoured", f"grpo.{key}") for key in ENTROPY_KEYS},
    **honoured(
        "grpo.max_turns: iterations + 1 (each round of tool calls adds an assistant turn)",
        "max_tool_calling_iterations",
    ),
    **refused(
        "not available: honing's GRPO has no importance-sampling correction of vLLM's samples",
        "vllm_importance_sampling_correction",
        "vllm_importance_sampling_mode",
        "vllm_importance_sampling_clip_max",
        "vllm_importance_sampling_clip_min",
        "vllm_importance_sampling_cap",
    ),  # fmt: skip
    **honoured(
        "grpo.off_policy_mask_threshold (the sampling policy's log-probs: the update's old ones)",
        "off_policy_mask_threshold",
    ),  # fmt: skip
    **honoured("grpo.use_bias_correction_kl", "use_bias_correction_kl"),
    **refused(HUB, "log_completions_hub_repo"),
}

RLOO: dict[str, Entry] = {
    **shared("rloo"),
    **honoured_in("rloo", "normalize_advantages", "reward_clip_range"),
}
