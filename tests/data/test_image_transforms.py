"""``data.image_transforms`` on tiny generated images: a fixed resize as PIL's, augmentations that keep the size
(a rotation equal to PIL's own, white corners, brightness, JPEG re-encoding at the drawn quality), drawn from the
seed and the image's name (the same image every time, another for another name or seed), applied where VL-SFT
loads its images; refused for the methods that do not read it."""

from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image, ImageStat

from honing.config import ConfigError, validate
from honing.config.image_schema import ImageTransformsSection
from honing.data.example_types import ContentItem
from honing.data.vision.image_transforms import WHITE, image_rng, transform_image
from honing.data.vision.vision_rows import VisionRows
from tests.recipes.test_vl_sft import vl_config


def page(width=48, height=32) -> Image.Image:
    """A grey page with a dark block left of centre (so a rotation or shift moves pixels)."""
    pixels = np.full((height, width, 3), 200, dtype=np.uint8)
    pixels[8:24, 6:20] = 30
    return Image.fromarray(pixels)


def test_resize_is_pils_resize_with_the_filter():
    image = page()
    square = transform_image(image, ImageTransformsSection(resize=20), "a")
    assert square.size == (20, 20) and square.tobytes() == image.resize((20, 20), Image.Resampling.BICUBIC).tobytes()
    wide = transform_image(image, ImageTransformsSection(resize=(30, 10), resample="lanczos"), "a")
    assert wide.tobytes() == image.resize((30, 10), Image.Resampling.LANCZOS).tobytes()


def test_draws_follow_the_seed_and_the_images_name_and_keep_the_size():
    transforms = ImageTransformsSection(probability=1.0, rotation_degrees=5, translate=0.05, brightness=0.3)
    first = transform_image(page(), transforms, "doc.pdf:1")
    assert first.size == (48, 32)
    assert transform_image(page(), transforms, "doc.pdf:1").tobytes() == first.tobytes()  # every epoch alike
    assert transform_image(page(), transforms, "doc.pdf:2").tobytes() != first.tobytes()
    reseeded = transforms.model_copy(update={"seed": 1})
    assert transform_image(page(), reseeded, "doc.pdf:1").tobytes() != first.tobytes()
    assert transform_image(page(), ImageTransformsSection(), "doc.pdf:1").tobytes() == page().tobytes()  # none


def test_a_rotation_is_pils_rotation_by_the_drawn_angle_with_white_corners():
    transforms = ImageTransformsSection(probability=1.0, rotation_degrees=10)
    rotated = transform_image(page(), transforms, "p")
    rng = image_rng(0, "p")
    rng.random(), rng.random()  # whether to augment, whether to warp
    angle = rng.uniform(-10, 10)
    expected = page().rotate(angle, resample=Image.Resampling.BILINEAR, fillcolor=WHITE)
    difference = np.abs(np.asarray(rotated, dtype=int) - np.asarray(expected, dtype=int))
    assert difference.max() <= 1  # the same warp (PIL rounds its own matrix to 15 digits)
    assert rotated.getpixel((0, 0)) == WHITE or rotated.getpixel((47, 31)) == WHITE


def test_brightness_and_jpeg_are_the_drawn_factor_and_quality():
    bright = transform_image(
        page(), ImageTransformsSection(probability=1.0, geometric_probability=0, brightness=0.3), "q"
    )
    rng = image_rng(0, "q")
    rng.random(), rng.random()
    factor = rng.uniform(0.7, 1.3)
    before, after = ImageStat.Stat(page()).mean[0], ImageStat.Stat(bright).mean[0]
    assert after == pytest.approx(min(before * factor, 255), abs=1.0)
    jpeg = transform_image(page(), ImageTransformsSection(probability=1.0, jpeg_quality=(10, 10)), "q")
    buffer = io.BytesIO()
    page().save(buffer, format="JPEG", quality=10)
    assert jpeg.tobytes() == Image.open(buffer).convert("RGB").tobytes() != page().tobytes()


def test_vl_sft_loads_its_images_through_the_transforms_and_keys_its_rows_by_them(tmp_path):
    path = tmp_path / "page.png"
    page().save(path)
    config = vl_config(tmp_path, tmp_path / "rows.jsonl", data={"image_transforms": {"resize": 16}})
    kind = SimpleNamespace(data=config.data)
    image = VisionRows.load_image(kind, ContentItem(type="image_path", content=str(path)))
    assert image.size == (16, 16)
    data = {"train": {"sources": [{"path": "x"}]}, "image_transforms": {"resize": 8}}
    raw = {"method": "vl_grpo", "model": {"config": {"model_type": "qwen2_vl"}}, "data": data,
           "grpo": {"rewards": [{"name": "countdown"}]}}  # fmt: skip
    with pytest.raises(ConfigError, match=r"data.image_transforms: not used by method 'vl_grpo'"):
        validate(raw)
    with pytest.raises(ConfigError, match=r"jpeg_quality: \[5, 99\]: expected \[low, high\] in 1..95"):
        vl_config(tmp_path, tmp_path / "rows.jsonl", data={"image_transforms": {"jpeg_quality": [5, 99]}})
