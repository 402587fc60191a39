"""The pair recipes' shared steps: the loss part read from the method's section, key by key."""

from __future__ import annotations

from honing.config.kto_schema import KTOSection
from honing.config.schema import CPOSection
from honing.methods.kto_loss import KTOLoss
from honing.methods.pair_losses import CPOLoss
from honing.recipes.pair_recipe import loss_from_section


def test_the_loss_part_takes_each_field_from_the_section_key_of_that_name():
    kto = KTOSection(beta=0.3, loss_type="apo_zero_unpaired", desirable_weight=2.0, undesirable_weight=0.5)
    assert loss_from_section(KTOLoss, kto) == KTOLoss(
        beta=0.3, loss_type="apo_zero_unpaired", desirable_weight=2.0, undesirable_weight=0.5
    )
    cpo = CPOSection(beta=0.2, loss_type="simpo", simpo_gamma=0.7, cpo_alpha=0.0, label_smoothing=0.1, alpha=0.25)
    assert loss_from_section(CPOLoss, cpo) == CPOLoss(
        beta=0.2, loss_type="simpo", label_smoothing=0.1, cpo_alpha=0.0, simpo_gamma=0.7, alpha=0.25
    )
