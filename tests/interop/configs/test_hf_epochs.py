"""A foreign config's fractional ``num_train_epochs`` is honing's fractional epoch duration (transformers' rule:
``ceil(epochs x steps per epoch)`` steps)."""

import copy

import pytest

from honing.config import validate
from honing.interop.configs import translate

OUMI = {
    "model": {"model_name": "Qwen/Qwen2.5-0.5B-Instruct"},
    "data": {"train": {"datasets": [{"dataset_name": "yahma/alpaca-cleaned"}]}},
    "training": {"trainer_type": "TRL_SFT"},
}


@pytest.mark.parametrize(("epochs", "duration"), [(0.5, "0.5epochs"), (2.0, "2epochs"), (1.25, "1.25epochs")])
def test_oumi_num_train_epochs_becomes_max_duration(epochs, duration):
    raw = copy.deepcopy(OUMI)
    raw["training"]["num_train_epochs"] = epochs
    translation = translate(raw)
    assert translation.refused == []
    assert validate(translation.config, source="oumi").trainer.max_duration == duration


def test_zero_epochs_is_refused_in_one_line():
    raw = copy.deepcopy(OUMI)
    raw["training"]["num_train_epochs"] = 0
    assert translate(raw).refused == ["training.num_train_epochs: 0.0: give a positive number of epochs"]
