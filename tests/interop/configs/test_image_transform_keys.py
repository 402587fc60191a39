"""olmOCR's ``AugraphyBasicAugmentations`` step translates to ``data.image_transforms`` (was refused), and what
honing does not do as augraphy does is said in one line."""

from __future__ import annotations

import copy

from honing.config import validate
from honing.interop.configs import translate
from tests.interop.configs.test_olmocr_configs import PIPELINE, TRAINER


def test_olmocrs_augraphy_step_is_the_image_transforms_at_its_probability():
    raw = copy.deepcopy(TRAINER)
    raw["dataset"]["train"][0]["pipeline"] = [*PIPELINE, {"name": "AugraphyBasicAugmentations", "probability": 0.3}]
    translation = translate(raw)
    assert translation.refused == []
    transforms = validate(translation.config).data.image_transforms
    assert (transforms.probability, transforms.geometric_probability) == (0.3, 0.5)
    assert (transforms.rotation_degrees, transforms.scale, transforms.translate) == (3.0, (0.95, 1.05), 0.02)
    assert transforms.jpeg_quality == (25, 95)
    assert any("ink effects" in note and "not built" in note for note in translation.notes)
