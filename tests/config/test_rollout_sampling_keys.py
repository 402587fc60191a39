"""grpo / rloo / online_dpo's min_p and repetition_penalty reach the sampler only when set, and the rollout server
refuses them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from honing.config.grpo_schema import GRPOSection
from honing.config.online_dpo_schema import OnlineDPOSection
from honing.config.rloo_schema import RLOOSection
from honing.methods.grpo_settings import grpo_settings, sampling_options, shared_settings
from honing.methods.grpo_validation import RewardValidation
from honing.methods.online_dpo import OnlineDPOTrainModule


def test_defaults_leave_the_sampler_its_three_keys():
    assert sampling_options(grpo_settings(GRPOSection())) == dict(temperature=1.0, top_p=1.0, top_k=0)


def test_set_filters_reach_the_sampler_of_grpo_and_rloo():
    options = sampling_options(grpo_settings(GRPOSection(min_p=0.1, repetition_penalty=1.2)))
    assert options["min_p"] == 0.1 and options["repetition_penalty"] == 1.2
    rloo = shared_settings(RLOOSection(min_p=0.2, repetition_penalty=0.9))
    assert (rloo["min_p"], rloo["repetition_penalty"]) == (0.2, 0.9)


@pytest.mark.parametrize("key, value", [("min_p", 0.1), ("repetition_penalty", 1.1)])
def test_the_rollout_server_refuses_the_filters_by_name(key, value):
    with pytest.raises(ValidationError, match=f"{key}: honing's rollout server samples"):
        GRPOSection(use_vllm=True, **{key: value})


def test_online_dpo_samples_with_them_too():
    settings = OnlineDPOTrainModule.settings(OnlineDPOSection(min_p=0.1, repetition_penalty=1.3))
    assert sampling_options(settings) == dict(temperature=0.9, top_p=1.0, top_k=0, min_p=0.1, repetition_penalty=1.3)


def test_the_held_out_prompts_sample_with_their_own_filters():
    validation = GRPOSection(validation={"min_p": 0.3, "repetition_penalty": 1.2}).validation
    options = sampling_options(RewardValidation.from_section(validation, seed=0))
    assert options == dict(temperature=0.0, top_p=1.0, top_k=0, min_p=0.3, repetition_penalty=1.2)
    assert sampling_options(RewardValidation.from_section(GRPOSection().validation, seed=0)) == dict(
        temperature=0.0, top_p=1.0, top_k=0
    )
    with pytest.raises(ValidationError, match="validation.min_p: honing's rollout server samples"):
        GRPOSection(use_vllm=True, validation={"min_p": 0.3})
