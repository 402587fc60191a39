"""TRL's min_p and repetition_penalty in an axolotl ``trl:`` section and Oumi's ``training.grpo.repetition_penalty``
translate onto honing's grpo keys of the same names (transformers' logits processors; tests/models/
test_sampling_filters.py checks them against transformers'), instead of the refusal they got before honing had them."""

from __future__ import annotations

from honing.interop.configs import translate


def oumi_grpo(**grpo: object) -> dict:
    """A minimal Oumi TRL_GRPO config with ``grpo`` as its training.grpo section."""
    return {
        "model": {"model_name": "m"},
        "data": {"train": {"datasets": [{"dataset_name": "d/prompts"}]}},
        "training": {
            "trainer_type": "TRL_GRPO",
            "per_device_train_batch_size": 8,
            "reward_functions": ["count_letters"],
            "grpo": {"num_generations": 4, **grpo},
        },
    }


def test_axolotls_trl_min_p_and_repetition_penalty_are_honings_grpo_keys():
    raw = {"base_model": "m", "rl": "grpo", "micro_batch_size": 8, "gradient_accumulation_steps": 1,
           "trl": {"num_generations": 4, "min_p": 0.05, "repetition_penalty": 1.1}}  # fmt: skip
    translation = translate(raw)
    assert not [line for line in translation.refused if line.startswith("trl.")]
    assert (translation.get("grpo.min_p"), translation.get("grpo.repetition_penalty")) == (0.05, 1.1)


def test_oumis_repetition_penalty_is_honings_and_its_default_writes_nothing():
    translation = translate(oumi_grpo(repetition_penalty=1.2))
    assert not [line for line in translation.refused if "repetition_penalty" in line]
    assert translation.get("grpo.repetition_penalty") == 1.2
    default = translate(oumi_grpo(repetition_penalty=1.0))
    assert not [line for line in default.refused if "repetition_penalty" in line]
    assert default.get("grpo.repetition_penalty") is None  # 1.0 divides by one: honing's default sampling
