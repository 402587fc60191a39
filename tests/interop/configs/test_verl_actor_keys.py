"""verl's actor keys under ``training.verl_config_overrides``: ``use_kl_loss`` with ``kl_loss_type`` as
``grpo.kl_estimator``, ``ppo_epochs`` as ``grpo.num_iterations``, ``ppo_mini_batch_size`` as
``grpo.steps_per_generation``, and the micro-batch and speed settings."""

from __future__ import annotations

import copy

import pytest

from honing.interop.configs import translate
from tests.interop.configs.test_oumi_document import VERL_GRPO, noted, translated


def with_overrides(actor=None, **sections):
    """VERL_GRPO (train_batch_size 128, n 4) with ``actor`` keys and other override sections added."""
    raw = copy.deepcopy(VERL_GRPO)
    overrides = raw["training"]["verl_config_overrides"]
    overrides["actor_rollout_ref"] = {"rollout": {"n": 4}, **sections.pop("aro", {})}
    if actor:
        overrides["actor_rollout_ref"]["actor"] = dict(actor)
    for name, values in sections.items():
        overrides.setdefault(name, {}).update(values)
    return raw


@pytest.mark.parametrize(
    ("kl_loss_type", "estimator"),
    [("kl", "k1"), ("k1", "k1"), ("abs", "abs"), ("mse", "k2"), ("k2", "k2"), ("low_var_kl", "low_var_kl"),
     ("k3", "low_var_kl"), (None, "low_var_kl")],
)  # fmt: skip
def test_kl_loss_type_is_the_kl_estimator_without_the_ratio(kl_loss_type, estimator):
    actor = {"use_kl_loss": True, "kl_loss_coef": 0.01}
    if kl_loss_type is not None:
        actor["kl_loss_type"] = kl_loss_type
    translation = translated(with_overrides(actor))
    assert translation.get("grpo.kl_estimator") == estimator  # None: verl's default, low_var_kl
    assert translation.get("grpo.use_bias_correction_kl") is False  # verl adds β × the estimate alone
    assert translation.get("grpo.beta") == 0.01


@pytest.mark.parametrize("kl_loss_type", ["k3+", "full", "reverse"])
def test_kl_loss_types_not_built_are_refused_by_name(kl_loss_type):
    translation = translate(with_overrides({"use_kl_loss": True, "kl_loss_type": kl_loss_type}))
    assert len(translation.refused) == 1
    assert "verl_config_overrides.actor_rollout_ref.actor.kl_loss_type" in translation.refused[0]


def test_ppo_epochs_mini_and_micro_batches_become_num_iterations_steps_per_generation_and_micro_batches():
    actor = {"ppo_epochs": 2, "ppo_mini_batch_size": 32, "ppo_micro_batch_size_per_gpu": 8}
    translation = translated(with_overrides(actor))
    assert translation.get("grpo.num_iterations") == 2
    assert translation.get("grpo.steps_per_generation") == 128 // 32  # updates per rollout batch of 128 prompts
    assert translation.get("data.micro_batch_size") == 8 // 4  # 8 completions of groups of 4: 2 prompts


def test_mini_batches_that_do_not_divide_the_batch_are_refused_and_micro_batches_may_split_groups():
    translation = translate(with_overrides({"ppo_mini_batch_size": 48, "ppo_micro_batch_size_per_gpu": 6}))
    assert translation.refused == ["training.verl_config_overrides.actor_rollout_ref.actor.ppo_mini_batch_size: 48 "
                                   "must divide data.train_batch_size (128), as in verl"]  # fmt: skip
    # 6 completions of groups of 4 per forward pass: part of a group, as verl's micro-batches may hold
    assert translation.get("grpo.micro_batch_completions") == 6 and translation.get("data.micro_batch_size") is None


def test_speed_settings_and_overlong_prompt_filtering_are_noted():
    raw = with_overrides(
        aro={"model": {"use_remove_padding": True}, "ref": {"log_prob_micro_batch_size_per_gpu": 16}},
        data={"filter_overlong_prompts": True},
    )
    translation = translated(raw)
    prefix = "training.verl_config_overrides"
    assert "speed setting" in noted(translation, f"{prefix}.actor_rollout_ref.model.use_remove_padding")
    assert "reference" in noted(translation, f"{prefix}.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu")
    assert "drops" in noted(translation, f"{prefix}.data.filter_overlong_prompts")
    raw["training"]["verl_config_overrides"]["data"]["filter_overlong_prompts"] = False
    assert any("filter_overlong_prompts" in line for line in translate(raw).refused)
