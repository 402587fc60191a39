"""The ``data.image_transforms`` section: what is done to each image of vision-language SFT before its processor
sees it: a fixed resize (axolotl's ``image_size``) and seeded augmentations (olmOCR's
``AugraphyBasicAugmentations`` step: a small rotation, zoom and shift, brightness, contrast, JPEG re-encoding)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from honing.config.section import Section


class ImageTransformsSection(Section):
    """Each image resized, then augmented with ``probability``; an image's draw is seeded by ``seed`` and the
    image's own name (file, page, URL), so it is the same in every epoch, at build and at batch time (the rows'
    image token counts stay what they were built with), and a resumed run sees the same pixels."""

    resize: int | tuple[int, int] | None = None
    """Every image resized to this size in pixels: one number for a square, or ``[width, height]``; None: as read
    (the processor's own ``min_pixels`` / ``max_pixels`` bounds still apply)."""
    resample: Literal["bilinear", "bicubic", "lanczos"] = "bicubic"
    """The resize filter."""
    probability: float = Field(default=0.0, ge=0.0, le=1.0)
    """The share of images augmented (then each augmentation below that is set applies); 0: none."""
    geometric_probability: float = Field(default=1.0, ge=0.0, le=1.0)
    """Of the augmented images, the share also rotated, zoomed and shifted (olmOCR: 0.5)."""
    rotation_degrees: float = Field(default=0.0, ge=0.0, le=45.0)
    """A rotation drawn uniformly in +-this many degrees about the centre, the size kept, corners filled white."""
    scale: tuple[float, float] = (1.0, 1.0)
    """A zoom factor drawn uniformly in this range (olmOCR: [0.95, 1.05]), the size kept."""
    translate: float = Field(default=0.0, ge=0.0, le=0.5)
    """A shift drawn uniformly in +-this fraction of the width and of the height (olmOCR: 0.02)."""
    brightness: float = Field(default=0.0, ge=0.0, le=1.0)
    """Brightness multiplied by a factor drawn in [1 - this, 1 + this]; 0: unchanged."""
    contrast: float = Field(default=0.0, ge=0.0, le=1.0)
    """Contrast multiplied by a factor drawn in [1 - this, 1 + this]; 0: unchanged."""
    jpeg_quality: tuple[int, int] | None = None
    """Re-encoded as JPEG at a quality drawn in this range (1-95), its artefacts kept; None: not re-encoded."""
    seed: int = Field(default=0, ge=0)
    """The draws' seed (with each image's name)."""

    @model_validator(mode="after")
    def _ranges(self) -> ImageTransformsSection:
        low, high = self.scale
        if not 0 < low <= high:
            raise ValueError(
                f"data.image_transforms.scale: {list(self.scale)}: expected [low, high] with 0 < low <= high"
            )
        if self.jpeg_quality is not None and not 1 <= self.jpeg_quality[0] <= self.jpeg_quality[1] <= 95:
            raise ValueError(
                f"data.image_transforms.jpeg_quality: {list(self.jpeg_quality)}: expected [low, high] in 1..95"
            )
        sizes = (self.resize,) * 2 if isinstance(self.resize, int) else self.resize or (1, 1)
        if min(sizes) < 1:
            raise ValueError(f"data.image_transforms.resize: {self.resize}: expected sizes of 1 pixel or more")
        return self
