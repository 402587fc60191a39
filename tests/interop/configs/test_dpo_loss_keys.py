"""DPOConfig's loss keys (TRL's names) reach honing's ``dpo`` section from a TRL DPOConfig's arguments and from Oumi's
``trainer_kwargs``, and the result validates; a value that is no loss type list is refused by name."""

from honing.config import validate
from honing.interop.configs.trl_args import translate_trl_args
from tests.interop.configs.test_oumi_options import translated

LOSS_KEYS = {
    "loss_type": ["sigmoid", "ipo", "sft"],
    "loss_weights": [0.8, 0.2, 1],
    "f_divergence_type": "js_divergence",
    "ld_alpha": 0.5,
    "beta": 0.2,
}
EXPECTED = {**LOSS_KEYS, "loss_type": ["sigmoid", "ipo", "sft"], "loss_weights": [0.8, 0.2, 1.0]}


def test_a_dpo_configs_loss_keys_reach_the_dpo_section():
    translation = translate_trl_args(dict(LOSS_KEYS, use_weighting=True, loss_type=["sigmoid", "ipo"],
                                          loss_weights=[1, 2]), "DPOConfig")  # fmt: skip
    assert translation.refused == []
    dpo = translation.config["dpo"]
    assert dpo["loss_type"] == ["sigmoid", "ipo"] and dpo["loss_weights"] == [1.0, 2.0] and dpo["use_weighting"]
    assert (dpo["ld_alpha"], dpo["f_divergence_type"]) == (0.5, "js_divergence")
    single = translate_trl_args({"loss_type": ["exo_pair"], "label_smoothing": 1e-3}, "DPOConfig").config["dpo"]
    assert single == {"loss_type": "exo_pair", "label_smoothing": 1e-3}
    bad = translate_trl_args({"loss_type": 3, "loss_weights": "heavy"}, "DPOConfig")
    assert [line.split(":")[0] for line in bad.refused] == ["loss_type", "loss_weights"]


def test_oumis_trainer_kwargs_reach_the_dpo_section_and_validate():
    training = {"trainer_type": "TRL_DPO", "trainer_kwargs": dict(LOSS_KEYS)}
    translation = translated(
        training=training, **{"data.train.datasets.0.dataset_name": "trl-lib/ultrafeedback_binarized"}
    )
    assert translation.refused == [] and translation.config["dpo"] == EXPECTED
    raw = translation.config
    config = validate(raw, source="oumi")
    assert config.dpo.loss_types == ["sigmoid", "ipo", "sft"] and config.dpo.ld_alpha == 0.5
