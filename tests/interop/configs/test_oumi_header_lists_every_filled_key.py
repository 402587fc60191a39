"""docs/coming-from.md's "each listed in the header": every key a bare Oumi config's translation writes is either the
file's own (its model, rows and trainer) or a default filled in, listed with whose it is; a value the file sets is
not listed (issue 44's second audit: VERL_GRPO's prompts per step, verl's data.train_batch_size 1024, was written as
if the file had set it)."""

from __future__ import annotations

import pytest

from honing.interop.configs import translate
from tests.interop.configs.test_oumi_defaults import bare

# model_name, datasets, trainer_type (and VERL_GRPO's reward_functions)
FROM_THE_FILE = {"method", "model.name_or_path", "data.train.sources", "grpo.rewards"}


def leaves(node, prefix=""):
    """(dotted key, value) of every value the translated config holds."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaves(value, f"{prefix}{key}.")
    else:
        yield prefix[:-1], node


@pytest.mark.parametrize("trainer_type", ["TRL_SFT", "TRL_DPO", "TRL_GRPO", "VERL_GRPO", "OUMI", "HF"])
def test_every_key_the_file_did_not_set_is_listed_as_a_default(trainer_type):
    translation = translate(bare(trainer_type))
    assert translation.refused == []
    unlisted = [key for key, _ in leaves(translation.config) if key not in translation.defaults]
    assert set(unlisted) <= FROM_THE_FILE, unlisted


def test_verls_prompts_per_step_are_its_default_until_the_overrides_set_them():
    translation = translate(bare("VERL_GRPO"))
    assert translation.config["data"]["global_batch_size"] == 1024
    assert translation.defaults["data.global_batch_size"] == "verl's data.train_batch_size"
    raw = bare("VERL_GRPO")
    raw["training"]["verl_config_overrides"] = {"data": {"train_batch_size": 64}}
    overridden = translate(raw)
    assert overridden.config["data"]["global_batch_size"] == 64
    assert "data.global_batch_size" not in overridden.defaults
