"""olmOCR's ``AugraphyBasicAugmentations`` pipeline step as honing's ``data.image_transforms``: with the step's
``probability``, half of the pages warped (a rotation within 3 degrees, a zoom in 0.95-1.05, a shift within 2%,
white corners), then brightness and JPEG re-encoding (augraphy's ``Brightness`` and ``Jpeg`` ranges)."""

from __future__ import annotations

from typing import Any

from honing.interop.configs.translation import Translation

DEFAULT_PROBABILITY = 0.5  # the step's own default
NOT_BUILT = (
    "augraphy's ink effects (InkBleed, LowInkRandomLines / PeriodicLines, InkMottling, InkShifter) are not built; "
    "the angle is drawn uniformly (olmOCR: a clipped normal), brightness and JPEG both apply (augraphy picks one), "
    "and a page is drawn once per run, not again each epoch"
)


def augment_like_olmocr(t: Translation, where: str, probability: Any) -> None:
    """The step's augmentations at ``probability`` as ``data.image_transforms``, with a note of what differs."""
    probability = DEFAULT_PROBABILITY if probability is None else float(probability)
    t.set(
        "data.image_transforms",
        {
            "probability": probability,
            "geometric_probability": 0.5,
            "rotation_degrees": 3.0,
            "scale": [0.95, 1.05],
            "translate": 0.02,
            "brightness": 0.2,
            "jpeg_quality": [25, 95],
        },
    )
    t.note(where, f"data.image_transforms at probability {probability:g}; {NOT_BUILT}")
