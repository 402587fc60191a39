"""``data.image_transforms`` applied to one image: a fixed resize, then seeded augmentations that keep its size
(a small rotation, zoom and shift with white corners, brightness, contrast, JPEG re-encoding), drawn from the
section's seed and the image's own name, so an image looks the same at build and at batch time and in every epoch."""

from __future__ import annotations

import hashlib
import io
from typing import Any

import numpy as np
from PIL import Image, ImageEnhance

RESAMPLE = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC,
            "lanczos": Image.Resampling.LANCZOS}  # fmt: skip
WHITE = (255, 255, 255)


def image_rng(seed: int, name: str) -> np.random.Generator:
    """The generator of one image's draws: the section's seed and a digest of the image's name."""
    digest = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")
    return np.random.default_rng([seed, digest])


def transform_image(image: Image.Image, transforms: Any, name: str) -> Image.Image:
    """``image`` resized and augmented as ``transforms`` (an ``ImageTransformsSection``) says; ``name`` names the
    image (its file, page or URL) for its draws."""
    if transforms.resize is not None:
        size = (transforms.resize,) * 2 if isinstance(transforms.resize, int) else tuple(transforms.resize)
        image = image.resize(size, RESAMPLE[transforms.resample])
    rng = image_rng(transforms.seed, name)
    if transforms.probability <= 0 or rng.random() >= transforms.probability:
        return image
    if rng.random() < transforms.geometric_probability:
        image = _geometric(image, transforms, rng)
    for amount, enhancer in (
        (transforms.brightness, ImageEnhance.Brightness),
        (transforms.contrast, ImageEnhance.Contrast),
    ):
        if amount:
            image = enhancer(image).enhance(rng.uniform(1 - amount, 1 + amount))
    if transforms.jpeg_quality is not None:
        low, high = transforms.jpeg_quality
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=int(rng.integers(low, high + 1)))
        image = Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")
    return image


def _geometric(image: Image.Image, transforms: Any, rng: np.random.Generator) -> Image.Image:
    """A rotation, zoom and shift about the centre, the size kept and the uncovered corners white (olmOCR's
    geometric step, done with PIL's affine warp instead of OpenCV's)."""
    angle = rng.uniform(-transforms.rotation_degrees, transforms.rotation_degrees)
    scale = rng.uniform(*transforms.scale)
    width, height = image.size
    shift = (rng.uniform(-transforms.translate, transforms.translate) * width,
             rng.uniform(-transforms.translate, transforms.translate) * height)  # fmt: skip
    if angle == 0 and scale == 1 and shift == (0, 0):
        return image
    # the inverse map PIL's affine transform takes: output pixel -> input pixel
    theta = -np.deg2rad(angle)  # counter-clockwise for a positive angle, as PIL's rotate
    cos, sin = np.cos(theta) / scale, np.sin(theta) / scale
    cx, cy = width / 2, height / 2
    ox, oy = cx + shift[0], cy + shift[1]
    matrix = (cos, sin, cx - cos * ox - sin * oy, -sin, cos, cy + sin * ox - cos * oy)
    return image.transform(image.size, Image.Transform.AFFINE, matrix, Image.Resampling.BILINEAR, fillcolor=WHITE)
