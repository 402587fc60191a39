"""The mini-OCR task (``generated:ocr``): images of short random strings to transcribe, olmOCR's task in miniature.

Each string is typed with PIL's built-in font (no font file, no download) on a small white strip, one character
centred in each 28 x 28 cell, as on a typewriter: one cell is one merged Qwen2-VL patch (14-pixel patches merged
2 x 2), so the k-th image token holds the k-th character. Every strip of a set has the width of its longest
string (at least 4 cells, which Qwen2-VL's processor leaves unresized). The images (PNG, or one-page PDFs with
``pdf``) sit in a folder beside a conversation-format JSONL whose user turn is an instruction and the image and
whose assistant turn is the string. ``blank`` keeps the strings and leaves the images empty: a model that scores
as well on those is not reading the image.
"""

from __future__ import annotations

import functools
import json
import os
import random
import time
from typing import Any

from honing.cache import atomic_write
from honing.errors import DataError

# Digits and letters that look unlike each other and unlike the digits in the small default font (no O/0, I/1,
# S/5, B/8): a tiny model learns them quickly, and a few characters from 16 make chance exact match ~1e-4.
ALPHABET = "0123456789ACEHKX"
PROMPT = "Transcribe the text in the image."
OPTIONS = ("pdf", "blank", "length")  # besides samples and seed
DEFAULT_LENGTH = (3, 5)
MAX_LENGTH = 12
HEIGHT = 28
WIDTH_STEP = 28  # one cell per character: one merged Qwen2-VL patch
MIN_CELLS = 4  # 4 x 28 x 28 = 3,136 pixels, Qwen2-VL's default min_pixels: no strip is resized
FONT_SIZE = 22
VERSION = 3  # part of the folder's name: bump it whenever the rows or images change
PDF_DATE = time.gmtime(0)  # fixed, so a PDF's bytes depend on the seed only


def ocr_settings(path: str, options: dict[str, str]) -> dict[str, Any]:
    """``pdf``, ``blank`` (0 or 1) and ``length`` (``N`` or ``MIN-MAX`` characters) from a ``generated:ocr`` path."""
    settings: dict[str, Any] = {}
    for flag in ("pdf", "blank"):
        value = options.get(flag, "0")
        if value not in ("0", "1"):
            raise DataError(f"{path}: {flag} must be 0 or 1, got {value!r}")
        settings[flag] = value == "1"
    text = options.get("length", "-".join(map(str, DEFAULT_LENGTH)))
    low, _, high = text.partition("-")
    try:
        shortest, longest = int(low), int(high or low)
    except ValueError:
        raise DataError(f"{path}: length must be N or MIN-MAX characters, got {text!r}") from None
    if not 1 <= shortest <= longest <= MAX_LENGTH:
        raise DataError(f"{path}: length must be within 1-{MAX_LENGTH} characters, MIN <= MAX; got {text!r}")
    settings["length"] = (shortest, longest)
    return settings


def ocr_folder_name(samples: int, seed: int, *, pdf: bool, blank: bool, length: tuple[int, int]) -> str:
    """The cache folder's name for one set of settings."""
    flags = ("-pdf" if pdf else "") + ("-blank" if blank else "")
    return f"ocr-{samples}-{seed}-len{length[0]}-{length[1]}{flags}-v{VERSION}"


def ocr_strings(samples: int, seed: int, length: tuple[int, int] = DEFAULT_LENGTH) -> list[str]:
    """The strings of a set: the same for a seed whatever the image options, so blank images keep the answers."""
    rng = random.Random(f"ocr:{seed}")  # string seeds are stable across Python runs
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(*length))) for _ in range(samples)]


@functools.cache
def _font() -> Any:
    from PIL import ImageFont

    return ImageFont.load_default(size=FONT_SIZE)  # Pillow's embedded font: no file, no download


def render_text(text: str, cells: int, *, blank: bool = False) -> Any:
    """A greyscale strip of ``cells`` 28-pixel cells with ``text`` in black on white, one character per cell."""
    from PIL import Image, ImageDraw

    image = Image.new("L", (cells * WIDTH_STEP, HEIGHT), 255)
    if not blank:
        draw = ImageDraw.Draw(image)
        for index, character in enumerate(text):
            draw.text((index * WIDTH_STEP + WIDTH_STEP / 2, HEIGHT / 2), character, font=_font(), fill=0, anchor="mm")
    return image


def write_ocr_set(
    folder: str, *, samples: int, seed: int, pdf: bool = False, blank: bool = False, length=DEFAULT_LENGTH
) -> str:
    """Write the images and ``rows.jsonl`` into ``folder`` unless already there; the JSONL file's path.

    Every file is written atomically and the JSONL last, so a reader that finds it finds every image."""
    rows_path = os.path.join(folder, "rows.jsonl")
    if os.path.exists(rows_path):
        return rows_path
    try:
        import PIL  # noqa: F401
    except ImportError as error:
        raise DataError("generated:ocr draws images with Pillow: pip install 'honing[vision]'") from error
    cells = max(MIN_CELLS, length[1])  # one width for the whole set: the strip never tells the length
    lines = []
    for index, text in enumerate(ocr_strings(samples, seed, length)):
        image = render_text(text, cells, blank=blank)
        name = f"images/{index:05d}.{'pdf' if pdf else 'png'}"
        if pdf:
            item = {"type": "pdf", "content": name, "page": 1}
            # At PIL's default 72 dpi a pixel is a point, so the page renders back at the image's size.
            save = {"format": "PDF", "creationDate": PDF_DATE, "modDate": PDF_DATE}
        else:
            item, save = {"type": "image_path", "content": name}, {"format": "PNG"}
        atomic_write(os.path.join(folder, name), lambda handle, image=image, save=save: image.save(handle, **save))
        # the instruction first, the image last: its tokens sit right before the reply that reads them, which a
        # small model trained from scratch learns to attend to far sooner than across the instruction
        user = {"role": "user", "content": [{"type": "text", "content": PROMPT}, item]}
        lines.append(json.dumps({"messages": [user, {"role": "assistant", "content": text}]}) + "\n")
    atomic_write(rows_path, lambda handle: handle.write("".join(lines).encode("utf-8")))
    return rows_path
