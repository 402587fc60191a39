"""A translated config asking for vLLM inside the training process (``vllm_mode: colocate``: TRL's default with
``use_vllm``), which honing does not build, samples with honing's own decoder in the training process instead, said
in one note naming the way to a rollout server; ``vllm_mode: server`` still asks for the server. honing's own config
with colocate is refused at train time in one line naming the key and both fixes."""

from __future__ import annotations

import pytest

from honing.config import validate
from honing.config.schema import GRPOSection
from honing.errors import ConfigError
from honing.interop.configs.dialects import translate
from honing.recipes.rollout_backend import rollout_sampler

NOWHERE = "http://127.0.0.1:9"  # the discard port: nothing answers there
TRL_GRPO = {"model_name_or_path": "m", "dataset_name": "trl-lib/tldr", "reward_funcs": ["my_rewards.length.short"]}


def colocate_notes(notes: list[str]) -> list[str]:
    """The notes that say where a colocate request samples."""
    return [note for note in notes if "'colocate' (vLLM inside the training process)" in note]


@pytest.mark.parametrize("mode", [None, "colocate"])
def test_trl_colocate_samples_with_honings_decoder_in_the_training_process(mode):
    values = {**TRL_GRPO, "use_vllm": True} | ({"vllm_mode": mode} if mode else {})
    t = translate(values, "f", "trl-grpo")
    assert t.refused == [] and "vllm_mode" not in t.config["grpo"]
    (note,) = colocate_notes(t.notes)
    assert note.startswith("vllm_mode: ") and "grpo.vllm_mode: server" in note and "make vllm-serve" in note
    config = validate(t.config)
    assert config.grpo.use_vllm is False
    assert rollout_sampler(config.grpo, "grpo") is None  # the recipe's build: no server asked for, none refused


def test_trl_server_mode_still_asks_for_the_server():
    values = {**TRL_GRPO, "use_vllm": True, "vllm_mode": "server", "vllm_server_base_url": NOWHERE}
    values["vllm_server_timeout"] = 0.2
    t = translate(values, "f", "trl-grpo")
    assert colocate_notes(t.notes) == []
    config = validate(t.config)
    assert config.grpo.use_vllm is True and config.grpo.vllm_mode == "server"
    with pytest.raises(ConfigError, match=r"^grpo.vllm_server_base_url: no rollout server answers at "):
        rollout_sampler(config.grpo, "grpo")


def test_axolotl_and_oumi_colocate_sample_in_the_training_process():
    axolotl = {"base_model": "m", "rl": "grpo", "micro_batch_size": 8, "gradient_accumulation_steps": 1,
               "trl": {"num_generations": 4, "use_vllm": True, "vllm_mode": "colocate"}}  # fmt: skip
    oumi = {
        "model": {"model_name": "m"},
        "data": {"train": {"datasets": [{"dataset_name": "trl-lib/tldr"}]}},
        "training": {
            "trainer_type": "TRL_GRPO",
            "grpo": {"use_vllm": True, "vllm_mode": "colocate"},
            "reward_functions": ["soft_20tokens_completions"],
        },
    }
    for raw, dialect, key in ((axolotl, "axolotl", "trl.vllm_mode"), (oumi, "oumi", "training.grpo.vllm_mode")):
        t = translate(raw, "f", dialect)
        assert not [line for line in t.refused if "vllm" in line], dialect
        assert t.config["grpo"]["use_vllm"] is False and "vllm_mode" not in t.config["grpo"], dialect
        (note,) = colocate_notes(t.notes)
        assert note.startswith(f"{key}: "), dialect


def test_honings_own_colocate_is_refused_naming_the_key_and_both_fixes():
    with pytest.raises(ConfigError) as raised:
        rollout_sampler(GRPOSection(use_vllm=True, vllm_mode="colocate"), "grpo")
    message = str(raised.value)
    assert message.startswith("grpo.vllm_mode: 'colocate' ") and "\n" not in message
    assert "set grpo.use_vllm: false" in message and "grpo.vllm_mode: server" in message
