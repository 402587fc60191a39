"""TRL's newer GRPO / RLOO keys in the ``grpo`` and ``rloo`` sections: the loss types' own keys refused with the
others, ``scale_rewards`` as TRL's bools, ``reward_weights`` in place of each reward's weight, TRL's defaults."""

from __future__ import annotations

import typing

import pytest

from honing.config import ConfigError, validate
from honing.config.grpo_loss_schema import CLIPPED, GRPOLossType, weighted_rewards
from honing.losses import CLIPPED_LOSS_TYPES, GRPO_LOSS_TYPES

REWARDS = [{"name": "countdown"}, {"name": "exact_answer"}]


def config(method: str = "grpo", **section):
    raw = {
        "method": method,
        "data": {"train": {"sources": [{"path": "prompts.jsonl"}]}},
        "model": {"config": {"model_type": "llama"}},
        method: {"rewards": REWARDS, **section},
    }
    return validate(raw)


def refusal(method: str = "grpo", **section) -> str:
    with pytest.raises(ConfigError) as info:
        config(method, **section)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_the_schema_names_every_loss_type_the_loss_computes():
    assert set(typing.get_args(GRPOLossType)) == set(GRPO_LOSS_TYPES)
    assert set(CLIPPED) == set(CLIPPED_LOSS_TYPES)


@pytest.mark.parametrize("value, name", [(True, "group"), (False, "none"), ("batch", "batch")])
def test_scale_rewards_takes_trls_bools(value, name):
    assert config(scale_rewards=value).grpo.scale_rewards == name


@pytest.mark.parametrize(
    "loss_type, key, value",
    [
        ("dapo", "sapo_temperature_pos", 1.2),
        ("cispo", "delta", 1.5),
        ("sapo", "vespo_k_pos", 2.5),
        ("vespo", "sapo_temperature_neg", 0.9),
    ],
)
def test_a_key_its_loss_type_does_not_read_is_refused(loss_type, key, value):
    message = refusal(loss_type=loss_type, **{key: value})
    assert f"grpo.{key} is used by loss_type" in message and repr(loss_type) in message
    assert config(
        loss_type=loss_type, **{key: type(config().grpo).model_fields[key].default}
    )  # at its default: nothing


def test_the_loss_types_own_keys_are_accepted():
    section = config(loss_type="sapo", sapo_temperature_pos=1.2, sapo_temperature_neg=0.9).grpo
    assert (section.sapo_temperature_pos, section.sapo_temperature_neg) == (1.2, 0.9)
    assert config(loss_type="luspo", delta=1.5, importance_sampling_level="sequence").grpo.delta == 1.5
    assert config(loss_type="vespo", vespo_lambda_neg=1.0).grpo.vespo_lambda_neg == 1.0


@pytest.mark.parametrize("method", ["grpo", "rloo"])
def test_reward_weights_replace_each_rewards_weight(method):
    section = getattr(config(method, reward_weights=[0.25, 2.0]), method)
    assert weighted_rewards(section) == [("countdown", 0.25), ("exact_answer", 2.0)]
    assert weighted_rewards(getattr(config(method), method)) == [("countdown", 1.0), ("exact_answer", 1.0)]
    assert "2 rewards; give one per reward" in refusal(method, reward_weights=[1.0])
    both = [{"name": "countdown", "weight": 0.5}, {"name": "exact_answer"}]
    assert "give the weights in one place" in refusal(method, rewards=both, reward_weights=[1.0, 1.0])


def test_normalize_then_sum_does_not_read_scale_rewards():
    assert config(multi_objective_aggregation="normalize_then_sum").grpo.multi_objective_aggregation
    message = refusal(multi_objective_aggregation="normalize_then_sum", scale_rewards="batch")
    assert "grpo.scale_rewards is not read" in message


def test_defaults_are_trls():
    trl = pytest.importorskip("trl")
    grpo, rloo = trl.GRPOConfig, trl.RLOOConfig
    fields = {name: field.default for name, field in grpo.__dataclass_fields__.items()}
    section = config().grpo
    for key in (
        "max_completion_length",
        "sapo_temperature_pos",
        "sapo_temperature_neg",
        "vespo_k_pos",
        "vespo_lambda_pos",
        "vespo_k_neg",
        "vespo_lambda_neg",
        "delta",
        "reward_weights",
        "multi_objective_aggregation",
        "mask_truncated_completions",
        "top_entropy_quantile",
        "scale_rewards",
        "loss_type",
    ):
        assert getattr(section, key) == fields[key], key
    rloo_fields = {name: field.default for name, field in rloo.__dataclass_fields__.items()}
    rloo_section = config("rloo").rloo
    for key in ("max_completion_length", "reward_weights", "mask_truncated_completions"):
        assert getattr(rloo_section, key) == rloo_fields[key], key
