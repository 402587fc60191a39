"""The tests that show each honoured row of the TRL tables (``docs/reference/trl-keys.md``'s "shown by" column):
every honoured field is translated alone by ``WALK`` (parametrized ``[Class.key]``); the fields whose feature has
its own test (a run, a loss against TRL's function) name it here too. ``test_trl_schema_walk.py`` checks that
every test named exists."""

from __future__ import annotations

WALK = "tests/interop/configs/test_trl_schema_walk.py::test_each_honoured_field_reaches_its_honing_key"
EXTRAS = "tests/interop/configs/test_trl_training_extras.py"
DPO_KEYS = "tests/interop/configs/test_dpo_loss_keys.py::test_a_dpo_configs_loss_keys_reach_the_dpo_section"
ENTROPY_BONUS = "tests/methods/test_grpo_entropy_bonus.py"
GRPO_BATCH = "tests/interop/configs/test_trl_grpo_batch.py"
SAMPLING_FILTERS = "tests/models/test_sampling_filters.py"

# field -> the tests of the feature behind it (beside WALK), as "path::test"
FEATURE_TESTS: dict[str, tuple[str, ...]] = {
    "eval_on_start": (f"{EXTRAS}::test_eval_on_start_evaluates_at_step_0_before_training",),
    "activation_checkpointing_kwargs": (
        f"{EXTRAS}::test_activation_checkpointing_kwargs_are_honings_every_n_and_offload",
    ),
    "gradient_checkpointing_kwargs": (
        f"{EXTRAS}::test_activation_checkpointing_kwargs_are_honings_every_n_and_offload",
    ),
    "parallelism_config": (f"{EXTRAS}::test_parallelism_config_is_honings_mesh",),
    "optim_args": (f"{EXTRAS}::test_optim_args_are_read_as_transformers_reads_them_for_the_optimizer",),
    "torch_compile_backend": (f"{EXTRAS}::test_compile_backend_and_mode_turn_compile_on_and_another_value_is_refused",),
    "torch_compile_mode": (f"{EXTRAS}::test_compile_backend_and_mode_turn_compile_on_and_another_value_is_refused",),
    "chat_template_path": (f"{EXTRAS}::test_a_jinja_chat_template_path_is_the_templates_text",),
    "reward_weights": (f"{EXTRAS}::test_online_reward_weights_eval_generations_and_generation_kwargs",),
    "num_generations_eval": (f"{EXTRAS}::test_online_reward_weights_eval_generations_and_generation_kwargs",),
    "generation_kwargs": (f"{EXTRAS}::test_online_reward_weights_eval_generations_and_generation_kwargs",),
    "chat_template_kwargs": (
        f"{EXTRAS}::test_chat_template_kwargs_are_the_data_sections",
        "tests/data/test_chat_template_kwargs.py::test_the_templates_variable_is_given_at_the_prompts_rendering",
        "tests/methods/test_tool_turns.py::test_the_tool_turn_is_rendered_with_data_chat_template_kwargs",
    ),
    "min_p": (f"{SAMPLING_FILTERS}::test_min_p_equals_transformers_warper",),
    "repetition_penalty": (
        f"{SAMPLING_FILTERS}::test_repetition_penalty_equals_transformers_processor",
        f"{SAMPLING_FILTERS}::test_greedy_with_repetition_penalty_equals_transformers_generate",
    ),
    **dict.fromkeys(
        (
            "entropy_coef",
            "use_adaptive_entropy",
            "entropy_coef_min",
            "entropy_coef_max",
            "entropy_coef_delta",
            "entropy_target",
        ),
        (f"{ENTROPY_BONUS}::test_loss_gradients_and_adaptive_coefficient_equal_trl",),
    ),  # fmt: skip
    "off_policy_mask_threshold": (
        "tests/methods/test_grpo_off_policy.py::test_a_micro_batchs_loss_and_gradients_equal_trls_with_the_mask",
    ),
    **dict.fromkeys(("loss_weights", "ld_alpha", "f_divergence_type", "use_weighting"), (DPO_KEYS,)),
    "vllm_mode": (
        "tests/interop/configs/test_vllm_colocate.py::test_trl_colocate_samples_with_honings_decoder_in_the_training_process",
        "tests/interop/configs/test_vllm_colocate.py::test_trl_server_mode_still_asks_for_the_server",
    ),
    "generation_batch_size": (
        f"{GRPO_BATCH}::test_generation_batch_size_is_trls_generation_and_optimizer_steps_on_the_given_processes",
        f"{GRPO_BATCH}::test_a_generation_batch_size_trl_refuses_is_refused_in_one_line",
    ),
    "steps_per_generation": (f"{GRPO_BATCH}::test_the_translated_run_takes_trls_optimizer_steps_and_generations",),
    "num_generations": (f"{GRPO_BATCH}::test_prompts_and_optimizer_steps_per_generation_are_trls_at_any_world_size",),
}


def shown_by(config_class: str, key: str) -> list[str]:
    """The tests that show ``config_class``'s honoured ``key``: the walk's case, then its feature's own."""
    return [f"{WALK}[{config_class}.{key}]", *FEATURE_TESTS.get(key, ())]
