"""Oumi's ``trainer_type: TRL_KTO`` configs translate to ``method: kto``: TRL's KTOConfig keys from
``trainer_kwargs`` to the ``kto`` section, TRL's max_length to ``data.seq_len``, and Oumi's published Phi-3 KTO
recipe (skipped without ``../shared/foreign-configs``)."""

from pathlib import Path

import pytest
import yaml

from honing.config import validate
from honing.interop.configs import translate
from tests.interop.configs.test_oumi_options import translated, with_changes

PHI3_KTO = (
    Path(__file__).resolve().parents[3].parent / "shared" / "foreign-configs" / "oumi/recipes/phi3/kto/train.yaml"
)


def test_trl_kto_keys_reach_the_kto_section():
    kwargs = {"beta": 0.2, "desirable_weight": 1.33, "undesirable_weight": 0.9, "loss_type": "apo_zero_unpaired"}
    training = {"trainer_type": "TRL_KTO", "use_peft": True, "trainer_kwargs": {**kwargs, "max_length": 512}}
    translation = translated(training=training, **{"data.train.datasets.0.dataset_name": "trl-lib/kto-mix-14k"})
    config = translation.config
    assert config["method"] == "kto" and config["kto"] == kwargs and config["data"]["seq_len"] == 512
    assert translate(with_changes(training={"trainer_type": "TRL_KTO"})).config["data"]["seq_len"] == 1024  # TRL's


@pytest.mark.skipif(not PHI3_KTO.is_file(), reason=f"{PHI3_KTO} is absent (Oumi's published configs)")
def test_oumis_phi3_kto_recipe_translates():
    translation = translate(yaml.safe_load(PHI3_KTO.read_text()))
    assert translation.refused == []
    config = validate(translation.config, source="oumi")
    assert config.method == "kto" and config.model.lora is not None
    assert config.data.train.sources[0].path == "trl-lib/kto-mix-14k:train"
