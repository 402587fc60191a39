"""Tests for honing/data/vision/images.py: every image source, EXIF and mode handling, PDF pages, and bad images as
errors naming file:line or as counted skips."""

from __future__ import annotations

import base64
import io
import json
import sys
import uuid

import numpy as np
import pytest
from PIL import Image

from honing.data.formats import ContentItem, Conversation, Message, resolve_image_paths
from honing.data.row_reader import iter_examples, load_examples
from honing.data.vision.images import ImageError, check_images, load_image
from honing.errors import DataError


def png_bytes(image: Image.Image, format: str = "PNG", **save) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=format, **save)
    return buffer.getvalue()


def two_page_pdf(path) -> str:
    """A PDF of two pages, 100 x 50 points: white, then black."""
    white, black = Image.new("L", (100, 50), 255), Image.new("L", (100, 50), 0)
    white.save(path, format="PDF", save_all=True, append_images=[black])
    return str(path)


def item(kind: str, content: str, **extra) -> ContentItem:
    return ContentItem(type=kind, content=content, **extra)


def image_row(*items: dict) -> dict:
    content = [*items, {"type": "text", "content": "What is this?"}]
    return {"messages": [{"role": "user", "content": content}, {"role": "assistant", "content": "A picture."}]}


@pytest.fixture
def red(tmp_path):
    path = tmp_path / "red.png"
    Image.new("RGB", (6, 4), (255, 0, 0)).save(path)
    return path


def test_every_source_kind_gives_the_same_rgb_image(tmp_path, red):
    data = red.read_bytes()
    encoded = base64.b64encode(data).decode()
    memory = f"memory://{uuid.uuid4().hex}/red.png"
    import fsspec

    with fsspec.open(memory, "wb") as handle:
        handle.write(data)
    items = [
        item("image_path", str(red)),
        item("image_path", memory),
        item("image_url", f"file://{red}"),
        item("image_url", f"data:image/png;base64,{encoded}"),
        item("image_base64", encoded),
        item("image_base64", encoded.rstrip("=") + "\n"),  # padding dropped, a line break added: still read
        item("image_base64", f"data:image/png;base64,{encoded}"),
    ]
    for each in items:
        image = load_image(each)
        assert (image.mode, image.size, image.getpixel((0, 0))) == ("RGB", (6, 4), (255, 0, 0)), each


def test_exif_orientation_is_applied(tmp_path):
    # 20 x 10, left half red; EXIF orientation 6 means "rotate 90 degrees clockwise to view".
    array = np.zeros((10, 20, 3), dtype=np.uint8)
    array[:, :10] = (255, 0, 0)
    exif = Image.Exif()
    exif[0x0112] = 6
    path = tmp_path / "rotated.jpg"
    path.write_bytes(png_bytes(Image.fromarray(array), "JPEG", quality=95, exif=exif))
    image = load_image(item("image_path", str(path)))
    assert image.size == (10, 20)
    top, bottom = np.asarray(image)[2, 5], np.asarray(image)[17, 5]
    assert top[0] > 200 and top[1] < 60 and bottom.max() < 60  # the red half turned to the top


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda: Image.new("RGBA", (2, 2), (0, 0, 0, 0)), (255, 255, 255)),  # transparent: white, not black
        (lambda: Image.new("RGBA", (2, 2), (0, 0, 255, 255)), (0, 0, 255)),
        (lambda: Image.new("LA", (2, 2), (0, 0)), (255, 255, 255)),
        (lambda: Image.new("L", (2, 2), 128), (128, 128, 128)),
        (lambda: Image.new("1", (2, 2), 1), (255, 255, 255)),
        (lambda: Image.new("RGB", (2, 2), (0, 255, 0)).convert("P"), (0, 255, 0)),
        (lambda: Image.new("CMYK", (2, 2), (0, 0, 0, 0)), (255, 255, 255)),
        (lambda: Image.fromarray(np.full((2, 2), 65535, dtype=np.uint16)), (255, 255, 255)),  # 16-bit grey
    ],
)
def test_modes_become_rgb(tmp_path, make, expected):
    image = make()
    path = tmp_path / ("x.tiff" if image.mode == "CMYK" else "x.png")
    image.save(path)
    loaded = load_image(item("image_path", str(path)))
    assert loaded.mode == "RGB" and loaded.getpixel((1, 1)) == expected


def test_palette_transparency_is_laid_on_white(tmp_path):
    image = Image.new("P", (2, 2), 0)
    image.putpalette([0, 0, 0] * 256)
    image.info["transparency"] = 0
    path = tmp_path / "p.png"
    image.save(path, transparency=0)
    assert load_image(item("image_path", str(path))).getpixel((0, 0)) == (255, 255, 255)


def test_pdf_pages_render_at_dpi_or_longest_side(tmp_path):
    pdf = two_page_pdf(tmp_path / "doc.pdf")
    first = load_image(item("pdf", pdf))  # page 1 by default, at 72 dpi: one pixel per point
    assert (first.mode, first.size, first.getpixel((50, 25))) == ("RGB", (100, 50), (255, 255, 255))
    second = load_image(item("pdf", pdf, page=2), pdf_dpi=144)
    assert second.size == (200, 100) and second.getpixel((100, 50)) == (0, 0, 0)
    assert load_image(item("pdf", pdf, page=2), pdf_longest_side=1024).size == (1024, 512)
    # a cached page is handed out as a copy: drawing on one leaves the next untouched
    second.paste((255, 0, 0), (0, 0, 10, 10))
    assert load_image(item("pdf", pdf, page=2), pdf_dpi=144).getpixel((0, 0)) == (0, 0, 0)


BAD_IMAGES = {
    "missing file": (lambda tmp: item("image_path", str(tmp / "nope.png")), "file not found: {tmp}/nope.png"),
    "corrupt bytes": (
        lambda tmp: _write(tmp / "cut.png", png_bytes(Image.new("RGB", (64, 64), "blue"))[:60]),
        "corrupt image data",
    ),
    "not an image": (lambda tmp: _write(tmp / "x.png", b"<svg></svg>"), "cannot identify image file"),
    "unsupported mode": (
        lambda tmp: _write(tmp / "f.tiff", png_bytes(Image.new("F", (2, 2), 0.5), "TIFF")),
        "unsupported image mode 'F'",
    ),
    "a folder": (lambda tmp: item("image_path", str(tmp)), "is a folder, not an image file"),
    "bad base64": (lambda tmp: item("image_base64", "not base64 at all!"), "invalid base64"),
    "bad data uri": (lambda tmp: item("image_url", "data:image/png;base64"), "malformed data URI"),
    "pdf page out of range": (
        lambda tmp: item("pdf", two_page_pdf(tmp / "doc.pdf"), page=5),
        "pdf doc.pdf has 2 pages; page 5 was asked",
    ),
    "not a pdf": (
        lambda tmp: ContentItem(type="pdf", content=_write(tmp / "x.pdf", b"hello").content),
        "cannot open pdf x.pdf",
    ),
    "missing pdf": (lambda tmp: item("pdf", str(tmp / "gone.pdf")), "file not found: {tmp}/gone.pdf"),
}


def _write(path, data: bytes) -> ContentItem:
    path.write_bytes(data)
    return item("image_path", str(path))


@pytest.mark.parametrize("kind", BAD_IMAGES)
def test_bad_images_raise_image_error_naming_item_and_reason(tmp_path, kind):
    make, reason = BAD_IMAGES[kind]
    bad = make(tmp_path)
    with pytest.raises(ImageError) as info:
        load_image(bad)
    assert reason.format(tmp=tmp_path) in info.value.reason
    assert info.value.reason.startswith(bad.type) and str(info.value) == info.value.reason
    assert isinstance(info.value, DataError)


@pytest.mark.parametrize("kind", BAD_IMAGES)
def test_bad_image_row_fails_with_file_and_line_or_is_a_counted_skip(tmp_path, red, kind):
    make, reason = BAD_IMAGES[kind]
    bad = make(tmp_path).model_dump(exclude_none=True)
    good = {"type": "image_path", "content": "red.png"}  # relative to the data file
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(image_row(row)) + "\n" for row in [good, bad, good]))
    with pytest.raises(DataError) as info:
        load_examples([{"path": str(path)}], check_images=check_images)
    message = str(info.value)
    assert message.startswith(f"{path}:2: image 1 of 1 (") and reason.format(tmp=tmp_path) in message
    skipped = load_examples([{"path": str(path)}], bad_rows="skip", check_images=check_images)
    assert len(skipped.examples) == 2 and skipped.report.count == 1
    assert skipped.report.first_reasons[0].startswith(f"{path}:2: image 1 of 1")
    # without the check (text methods), rows load and relative paths are still made absolute
    loaded = load_examples([{"path": str(path)}])
    assert len(loaded.examples) == 3 and loaded.examples[0].images()[0].content == str(red)


def test_check_images_names_each_bad_image_once(tmp_path, red):
    missing = item("image_path", str(tmp_path / "gone.png"))
    convo = Conversation(
        messages=[
            Message(role="user", content=[item("image_path", str(red)), missing, missing]),
            Message(role="assistant", content="ok"),
        ]
    )
    assert check_images(convo) == [
        f"image 2 of 3 (image_path '{tmp_path}/gone.png': file not found: {missing.content})"
    ]


def test_relative_paths_resolve_against_the_folder():
    convo = Conversation(
        messages=[
            Message(
                role="user",
                content=[
                    item("image_path", "a/b.png"),
                    item("pdf", "../doc.pdf", page=3),
                    item("image_path", "/abs/c.png"),
                    item("image_path", "s3://bucket/d.png"),
                    item("image_url", "e.png"),
                    item("text", "hi"),
                ],
            ),
            Message(role="assistant", content="ok"),
        ]
    )
    local = resolve_image_paths(convo, "/data/set")
    assert [i.content for i in local.images()] == ["/data/set/a/b.png", "/data/doc.pdf", "/abs/c.png"] + [
        "s3://bucket/d.png",
        "e.png",
    ]
    assert local.images()[1].page == 3
    remote = resolve_image_paths(convo, "s3://bucket/set")
    assert [i.content for i in remote.images()][:2] == ["s3://bucket/set/a/b.png", "s3://bucket/doc.pdf"]
    text_only = Conversation(messages=[Message(role="user", content="hi"), Message(role="assistant", content="ok")])
    assert resolve_image_paths(text_only, "/x") is text_only


def test_without_pillow_or_pypdfium2_the_error_names_the_extra(tmp_path, red, monkeypatch):
    monkeypatch.setitem(sys.modules, "pypdfium2", None)
    with pytest.raises(DataError, match=r"needs pypdfium2: pip install 'honing\[vision\]'"):
        load_image(item("pdf", two_page_pdf(tmp_path / "doc.pdf"), page=2), pdf_dpi=10)
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(DataError, match=r"needs Pillow: pip install 'honing\[vision\]'"):
        load_image(item("image_path", str(red)))


def test_paths_relative_to_a_data_file_behind_an_fsspec_url(red):
    import fsspec

    root = f"memory:///{uuid.uuid4().hex}"  # the form fsspec lists memory files in
    with fsspec.open(f"{root}/pics/red.png", "wb") as handle:
        handle.write(red.read_bytes())
    with fsspec.open(f"{root}/set/rows.jsonl", "w") as handle:
        handle.write(json.dumps(image_row({"type": "image_path", "content": "../pics/red.png"})) + "\n")
    [(example, origin)] = list(iter_examples([{"path": f"{root}/set/rows.jsonl"}], check_images=check_images))
    assert origin == f"{root}/set/rows.jsonl:1" and example.images()[0].content == f"{root}/pics/red.png"
    assert load_image(example.images()[0]).getpixel((0, 0)) == (255, 0, 0)
