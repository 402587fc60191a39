"""The images of conversation content items, opened as RGB PIL images: files, URLs, base64 data and PDF pages.

Every image is turned upright by its EXIF orientation and converted to RGB (transparent pixels laid on white), so a
model sees what a viewer shows. A failure is an ``ImageError`` whose reason names the item and what went wrong;
``check_images`` opens all of a row's images while the data set is built, so a bad one is a bad row then, never
an exception in a loader worker mid-epoch.
"""

from __future__ import annotations

import base64
import binascii
import functools
import io
import os
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, TypeVar

from honing import storage
from honing.data.formats import ContentItem, Conversation
from honing.errors import DataError

if TYPE_CHECKING:
    from PIL.Image import Image
    from pypdfium2 import PdfPage

PageResult = TypeVar("PageResult")

VISION_EXTRA = "pip install 'honing[vision]'"
POINTS_PER_INCH = 72
DEFAULT_PDF_DPI = 72  # one pixel per PDF point: a page keeps the size its author gave it
URL_TIMEOUT_S = 30.0
PDF_CACHE_PAGES = 8  # rendered pages kept per process (a page of 1288 px is ~5 MB): repeats close together hit
DESCRIBED_CHARS = 48
# 16-bit greyscale ("I;16", PNG's 16-bit grey) maps to 8 bits by this factor: 65535 / 257 = 255.
SIXTEEN_TO_EIGHT_BITS = 257
WIDE_MODES = ("I", "I;16", "I;16L", "I;16B", "I;16N")
# pdfium is not thread-safe; loader workers are processes, but a caller may still use threads.
_PDFIUM_LOCK = threading.Lock()


class ImageError(DataError):
    """An image or PDF page that cannot be read; ``reason`` names the item and what went wrong."""

    def __init__(self, item: ContentItem, what: str):
        self.reason = f"{describe(item)}: {what}"
        super().__init__(self.reason)


def describe(item: ContentItem) -> str:
    """The item in a few words for a message: its type and path or URL (data itself is only counted)."""
    if item.type == "image_base64" or item.content.startswith("data:"):
        return f"{item.type} ({len(item.content):,} characters of data)"
    shown = item.content if len(item.content) <= 2 * DESCRIBED_CHARS else item.content[:DESCRIBED_CHARS] + "..."
    return f"{item.type} {shown!r}" + (f" page {item.page}" if item.type == "pdf" else "")


def load_image(
    item: ContentItem,
    *,
    pdf_dpi: float = DEFAULT_PDF_DPI,
    pdf_longest_side: int | None = None,
    timeout: float = URL_TIMEOUT_S,
) -> Image:
    """The RGB image an item names; a PDF page renders at ``pdf_dpi``, or with its longest side
    ``pdf_longest_side`` pixels when given (olmOCR renders 1024-1288)."""
    if item.type == "pdf":
        return _render_pdf(item, float(pdf_dpi), pdf_longest_side).copy()  # a copy: the cached one stays intact
    if not item.is_image:
        raise DataError(f"load_image takes an image or pdf item, got a {item.type} item")
    return _decode(item, _image_bytes(item, timeout))


def check_images(conversation: Conversation, *, timeout: float = URL_TIMEOUT_S) -> list[str]:
    """The reasons why images of the conversation cannot be read, each naming the image; empty when all open.

    Images are decoded whole (a truncated file fails only then); PDF pages are opened but not rendered."""
    reasons: list[str] = []
    seen: set[ContentItem] = set()
    items = conversation.images()
    for index, item in enumerate(items, start=1):
        if item in seen:  # the same picture shown twice in a row
            continue
        seen.add(item)
        try:
            if item.type == "pdf":
                _with_pdf_page(item, lambda page: None)
            else:
                _decode(item, _image_bytes(item, timeout))
        except ImageError as error:
            reasons.append(f"image {index} of {len(items)} ({error.reason})")
    return reasons


# ---- bytes of an image --------------------------------------------------------------------------------------


def _image_bytes(item: ContentItem, timeout: float) -> bytes:
    if item.type == "image_base64":
        text = item.content
        if text.startswith("data:"):
            return _data_uri(item)
        return _base64(item, text)
    if item.type == "image_url" and item.content.startswith("data:"):
        return _data_uri(item)
    if item.type == "image_url" and item.content.startswith(("http://", "https://")):
        return _download(item, timeout)
    return _read_file(item, item.content)  # image_path (local or fsspec URL), or a file:// / s3:// image_url


def _read_file(item: ContentItem, path: str) -> bytes:
    try:
        return storage.read_bytes(path)
    except FileNotFoundError:
        raise ImageError(item, f"file not found: {path}") from None
    except IsADirectoryError:
        raise ImageError(item, f"{path} is a folder, not an image file") from None
    except PermissionError:
        raise ImageError(item, f"cannot read {path}: permission denied") from None
    except OSError as error:
        raise ImageError(item, f"cannot read {path}: {error}") from None


def _download(item: ContentItem, timeout: float) -> bytes:
    request = urllib.request.Request(item.content, headers={"User-Agent": "honing"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.read()
    except urllib.error.HTTPError as error:
        raise ImageError(item, f"download failed: HTTP {error.code} {error.reason}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise ImageError(item, f"download failed ({reason}; timeout {timeout:g} s)") from None


def _data_uri(item: ContentItem) -> bytes:
    header, comma, payload = item.content[len("data:") :].partition(",")
    if not comma:
        raise ImageError(item, "malformed data URI: no ',' between its header and its data")
    if header.endswith(";base64"):
        return _base64(item, payload)
    return urllib.parse.unquote_to_bytes(payload)


def _base64(item: ContentItem, text: str) -> bytes:
    text = "".join(text.split())
    if not text:
        raise ImageError(item, "invalid base64: no data")
    # Missing padding is common in hand-made rows, and URL-safe base64 (- and _) in web exports.
    text += "=" * (-len(text) % 4)
    try:
        return base64.b64decode(text.replace("-", "+").replace("_", "/"), validate=True)
    except binascii.Error as error:
        raise ImageError(item, f"invalid base64 ({error})") from None


# ---- decoding -----------------------------------------------------------------------------------------------


def _pil() -> ModuleType:
    try:
        from PIL import Image
    except ImportError as error:
        raise DataError(f"reading images needs Pillow: {VISION_EXTRA}") from error
    return Image


def _decode(item: ContentItem, data: bytes) -> Image:
    Image = _pil()
    try:
        image = Image.open(io.BytesIO(data))
        image.load()  # decode now: a truncated or corrupt file fails here, not inside the processor
    except Image.DecompressionBombError as error:
        raise ImageError(item, f"image too large ({error})") from None
    except Image.UnidentifiedImageError:
        raise ImageError(
            item, "cannot identify image file: not a format Pillow reads (PNG, JPEG, GIF, BMP, TIFF, WebP ...)"
        ) from None
    except (OSError, SyntaxError, ValueError, EOFError) as error:
        raise ImageError(item, f"corrupt image data ({error})") from None
    return _to_rgb(item, image)


def _to_rgb(item: ContentItem, image: Image) -> Image:
    from PIL import Image as PILImage
    from PIL import ImageOps

    try:
        ImageOps.exif_transpose(image, in_place=True)  # not a copy of every upright image (the image is ours)
    except (OSError, ValueError, SyntaxError, KeyError, TypeError, ZeroDivisionError):
        pass  # a malformed EXIF block says nothing reliable about orientation; the pixels themselves are fine
    if image.mode == "F":  # Pillow would clamp the floats to 0-255, wrong for the usual 0-1 scale
        raise ImageError(item, "unsupported image mode 'F' (32-bit float, of no known scale); save it as 8-bit")
    if image.mode in WIDE_MODES:
        image = _eight_bit_grey(image)
    if image.mode == "RGB":
        return image
    try:
        if image.has_transparency_data:
            # Plain conversion keeps the colour under transparent pixels, often black: text drawn in black on a
            # transparent background would vanish. Laid on white, it looks as it does in a viewer.
            rgba = image.convert("RGBA")
            white = PILImage.new("RGBA", rgba.size, (255, 255, 255, 255))
            return PILImage.alpha_composite(white, rgba).convert("RGB")
        return image.convert("RGB")
    except (ValueError, OSError) as error:
        raise ImageError(
            item, f"unsupported image mode {image.mode!r} ({error}); expected 1, L, P, RGB, RGBA, CMYK or 16-bit grey"
        ) from None


def _eight_bit_grey(image: Image) -> Image:
    import numpy as np
    from PIL import Image as PILImage

    values = np.asarray(image).astype(np.float64)
    if values.max(initial=0) > 255:
        values = values / SIXTEEN_TO_EIGHT_BITS
    return PILImage.fromarray(np.clip(np.rint(values), 0, 255).astype(np.uint8), "L")


# ---- PDF pages ----------------------------------------------------------------------------------------------


def _pdfium() -> ModuleType:
    try:
        import pypdfium2
    except ImportError as error:
        raise DataError(f"rendering pdf pages needs pypdfium2: {VISION_EXTRA}") from error
    return pypdfium2


@functools.lru_cache(maxsize=PDF_CACHE_PAGES)
def _render_pdf(item: ContentItem, dpi: float, longest_side: int | None) -> Image:
    if longest_side is not None and longest_side < 1:
        raise DataError(f"pdf_longest_side must be >= 1 pixel, got {longest_side}")
    if dpi <= 0:
        raise DataError(f"pdf_dpi must be > 0, got {dpi:g}")

    def render(page: PdfPage) -> Image:
        width, height = page.get_size()  # in points, 1/72 inch
        scale = longest_side / max(width, height, 1e-6) if longest_side else dpi / POINTS_PER_INCH
        return page.render(scale=scale).to_pil().convert("RGB")  # converted: a copy that outlives the bitmap

    return _to_rgb(item, _with_pdf_page(item, render))


def _with_pdf_page(item: ContentItem, use: Callable[[PdfPage], PageResult]) -> PageResult:
    """``use(page)`` on the item's page, with the document open; errors name the file and the page."""
    pdfium = _pdfium()
    path = item.content
    if storage.is_url(path):
        source: bytes | str = _read_file(item, path)
    else:
        source = path[len("file://") :] if path.startswith("file://") else path
        if not os.path.exists(source):
            raise ImageError(item, f"file not found: {source}")
        if os.path.isdir(source):
            raise ImageError(item, f"{source} is a folder, not a pdf file")
    name = os.path.basename(path)
    with _PDFIUM_LOCK:
        try:
            document = pdfium.PdfDocument(source)
        except pdfium.PdfiumError as error:
            raise ImageError(item, f"cannot open pdf {name} ({error})") from None
        try:
            pages = len(document)
            if item.page > pages:
                raise ImageError(item, f"pdf {name} has {pages} page{'s' * (pages != 1)}; page {item.page} was asked")
            try:
                return use(document[item.page - 1])
            except pdfium.PdfiumError as error:
                raise ImageError(item, f"cannot render page {item.page} of pdf {name} ({error})") from None
        finally:
            document.close()
