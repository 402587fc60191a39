"""Tests for honing/data/generated/ocr.py: the mini-OCR set behind ``generated:ocr``."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from honing.data.generated.ocr import ALPHABET, HEIGHT, PROMPT, WIDTH_STEP, ocr_strings
from honing.data.generated.tasks import materialize
from honing.data.row_reader import load_examples
from honing.data.vision.images import check_images, load_image
from honing.errors import DataError


def folder_bytes(rows_path: str) -> dict[str, bytes]:
    folder = os.path.dirname(rows_path)
    return {
        os.path.relpath(os.path.join(parent, name), folder): open(os.path.join(parent, name), "rb").read()
        for parent, _, names in os.walk(folder)
        for name in names
    }


def test_rows_images_and_determinism(tmp_path):
    rows_path = materialize("generated:ocr?samples=12&seed=3", str(tmp_path / "a"))
    assert rows_path == str(tmp_path / "a" / "generated" / "ocr-12-3-len3-5-v3" / "rows.jsonl")
    rows = [json.loads(line) for line in open(rows_path)]
    answers = [row["messages"][1]["content"] for row in rows]
    assert answers == ocr_strings(12, 3) and answers != ocr_strings(12, 4)
    assert all(3 <= len(answer) <= 5 and set(answer) <= set(ALPHABET) for answer in answers)
    assert rows[0]["messages"][0]["content"] == [
        {"type": "text", "content": PROMPT},
        {"type": "image_path", "content": "images/00000.png"},
    ]
    # the same seed writes the same bytes, in another cache folder too
    again = materialize("generated:ocr?samples=12&seed=3", str(tmp_path / "b"))
    assert folder_bytes(again) == folder_bytes(rows_path) and len(folder_bytes(rows_path)) == 13
    mtime = os.stat(rows_path).st_mtime_ns
    assert materialize("generated:ocr?samples=12&seed=3", str(tmp_path / "a")) == rows_path
    assert os.stat(rows_path).st_mtime_ns == mtime


def test_images_decode_to_the_patch_grid_with_ink_and_blank_images_keep_the_answers(tmp_path):
    written = load_examples([{"path": materialize("generated:ocr?samples=20&length=6", str(tmp_path))}])
    blank = load_examples([{"path": materialize("generated:ocr?samples=20&length=6&blank=1", str(tmp_path))}])
    for example, control in zip(written.examples, blank.examples):
        assert example.messages[1].content == control.messages[1].content
        picture, empty = load_image(example.images()[0]), load_image(control.images()[0])
        width, height = picture.size
        assert (width, height) == (6 * WIDTH_STEP, HEIGHT) and empty.size == picture.size
        # one character per cell: every one of the 6 cells has ink, and it sits inside the cell
        cells = np.asarray(picture.convert("L")).reshape(HEIGHT, 6, WIDTH_STEP) < 128
        assert all(cells[:, cell].sum() > 10 for cell in range(6))
        assert not cells[:, :, 0].any() and not cells[:, :, -1].any()
        assert (np.asarray(empty) == 255).all()


def test_strips_of_a_set_share_one_width_of_at_least_four_cells(tmp_path):
    for query, cells in (("length=1-2", 4), ("length=3-7", 7)):
        examples = load_examples([{"path": materialize(f"generated:ocr?samples=8&{query}", str(tmp_path))}]).examples
        assert {load_image(example.images()[0]).size for example in examples} == {(cells * WIDTH_STEP, HEIGHT)}


def test_pdf_pages_render_like_the_pngs(tmp_path):
    pngs = load_examples(
        [{"path": materialize("generated:ocr?samples=4&seed=1", str(tmp_path))}], check_images=check_images
    )
    pdfs = load_examples(
        [{"path": materialize("generated:ocr?samples=4&seed=1&pdf=1", str(tmp_path))}], check_images=check_images
    )
    for png, pdf in zip(pngs.examples, pdfs.examples):
        item = pdf.images()[0]
        assert (item.type, item.page, item.content.endswith(".pdf")) == ("pdf", 1, True)
        page, picture = load_image(item), load_image(png.images()[0])
        assert page.size == picture.size
        # the same picture (the page embeds the image at one pixel per point; pdfium's filtering blurs edges a little)
        page_ink, png_ink = (255 - np.asarray(image.convert("L"), dtype=float) for image in (page, picture))
        assert np.corrcoef(page_ink.ravel(), png_ink.ravel())[0, 1] > 0.9


@pytest.mark.parametrize(
    "query, message",
    [
        ("pdf=2", "pdf must be 0 or 1, got '2'"),
        ("length=0", "length must be within 1-12 characters"),
        ("length=5-3", "length must be within 1-12 characters"),
        ("length=x", "length must be N or MIN-MAX characters, got 'x'"),
        ("font=big", "unknown option(s) font; expected samples, seed, pdf, blank and length"),
    ],
)
def test_bad_options_are_data_errors(tmp_path, query, message):
    with pytest.raises(DataError) as info:
        materialize(f"generated:ocr?samples=2&{query}", str(tmp_path))
    assert message in str(info.value)


def test_strings_use_the_whole_length_range():
    lengths = {len(text) for text in ocr_strings(200, 0, (2, 4))}
    assert lengths == {2, 3, 4}
