"""The dpo section's loss keys (TRL's DPOConfig names and defaults): what combines, and what is refused by name."""

import pytest
from pydantic import ValidationError

from honing.config.dpo_schema import DPOSection


def test_defaults_are_trls_and_a_list_of_loss_types_is_read():
    from trl import DPOConfig

    trl, section = DPOConfig("unused", use_cpu=True, bf16=False, report_to=[]), DPOSection()
    for key in ("beta", "label_smoothing", "f_divergence_type", "f_alpha_divergence_coef", "ld_alpha", "use_weighting",
                "discopop_tau", "loss_weights"):  # fmt: skip
        assert getattr(section, key) == getattr(trl, key), key
    assert section.loss_types == trl.loss_type == ["sigmoid"]
    mpo = DPOSection(loss_type=["sigmoid", "bco_pair", "sft"], loss_weights=[0.8, 0.2, 1.0])
    assert mpo.loss_types == ["sigmoid", "bco_pair", "sft"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"loss_type": ["sigmoid"], "loss_weights": [1.0, 2.0]}, "2 weights for 1 loss types"),
        ({"loss_type": "exo_pair"}, "exo_pair needs a value above 0"),
        ({"label_smoothing": 0.1}, "label_smoothing is used by loss_type robust, exo_pair"),
        ({"loss_type": "robust", "label_smoothing": 0.6}, "robust needs a value below 0.5"),
        ({"loss_type": "bco_pair", "f_divergence_type": "forward_kl"}, "does not apply to loss_type bco_pair"),
        ({"f_alpha_divergence_coef": 0.2}, "f_alpha_divergence_coef is used by f_divergence_type alpha_divergence"),
        ({"discopop_tau": 0.1}, "discopop_tau is used by loss_type discopop only"),
        ({"loss_type": ["aot", "sigmoid"], "use_weighting": True}, "use_weighting: not available with loss_type aot"),
        ({"loss_type": []}, "an empty list"),
        ({"ld_alpha": 1.5}, "less than or equal to 1"),
    ],
)
def test_a_setting_that_does_not_apply_is_refused_by_name(settings, message):
    with pytest.raises(ValidationError, match=message):
        DPOSection(**settings)
