"""A PDF page's anchor text: what its text layer holds (each run of text and each image, with its position in PDF
points), cut to a length, for a prompt that helps a model read the page (olmOCR's "document anchoring").

Read with pypdfium2 (the ``vision`` extra). The format is honing's own: a first line with the page's size, then one
line per element, ``[x,y] text`` or ``[image x0,y0 to x1,y1]``, top of the page first. When the elements do not
fit the length, the page's first and last elements are kept and those between are taken in reading order until
the length is reached, so the anchor always spans the whole page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from honing.data.formats import ContentItem
from honing.data.vision.images import _with_pdf_page

if TYPE_CHECKING:
    from pypdfium2 import PdfPage

MAX_ELEMENT_CHARS = 250  # one run of text longer than this keeps its head and tail
ESCAPES = str.maketrans({"[": "\\[", "]": "\\]", "\n": "\\n", "\r": "\\r", "\t": "\\t"})
WHOLE_PAGE_IMAGE = -1  # anchor_text_len: the anchor says only that the page is one image


@dataclass(frozen=True)
class PageElement:
    """A run of text at ``(x, y)`` (its lower left corner) or an image spanning ``(x, y)`` to ``(x1, y1)``."""

    x: float
    y: float
    text: str | None = None
    x1: float = 0.0
    y1: float = 0.0

    def line(self) -> str:
        """The element as one line of anchor text."""
        if self.text is None:
            return f"[image {self.x:.0f},{self.y:.0f} to {self.x1:.0f},{self.y1:.0f}]\n"
        return f"[{self.x:.0f},{self.y:.0f}] {self.text}\n"


def anchor_text(pdf: str, page: int, length: int) -> str:
    """The anchor text of page ``page`` (1-based) of the PDF file or URL ``pdf``, at most ``length`` characters
    besides its first line (-1: the page as one image). An unreadable file is an ImageError naming it."""
    item = ContentItem(type="pdf", content=pdf, page=page)
    width, height, elements = _with_pdf_page(item, read_page)
    return linearize(width, height, elements, length)


def read_page(page: PdfPage) -> tuple[float, float, list[PageElement]]:
    """The page's size in points and its elements: pdfium's text rectangles (runs of text on one line) and the
    bounds of its image objects."""
    import pypdfium2.raw as pdfium_c

    width, height = page.get_size()
    elements = []
    textpage = page.get_textpage()
    try:
        for index in range(textpage.count_rects()):
            left, bottom, right, top = textpage.get_rect(index)
            text = textpage.get_text_bounded(left, bottom, right, top).strip()
            if text:
                elements.append(PageElement(left, bottom, clean(text)))
    finally:
        textpage.close()
    for image in page.get_objects(filter=(pdfium_c.FPDF_PAGEOBJ_IMAGE,)):
        left, bottom, right, top = image.get_bounds()
        elements.append(PageElement(left, bottom, None, right, top))
    return width, height, elements


def clean(text: str) -> str:
    """One run of text on one line: brackets and control characters escaped, a long run cut in its middle."""
    text = text.translate(ESCAPES)
    if len(text) <= MAX_ELEMENT_CHARS:
        return text
    half = MAX_ELEMENT_CHARS // 2 - 3
    return f"{text[:half]} ... {text[-half:]}"


def linearize(width: float, height: float, elements: list[PageElement], length: int) -> str:
    """The page's first line, then its elements top to bottom (left to right on a line) within ``length``."""
    head = f"Page size: {width:.1f}x{height:.1f} points\n"
    if length == WHOLE_PAGE_IMAGE:
        return head + PageElement(0.0, 0.0, None, width, height).line()
    ordered = sorted(elements, key=lambda element: (-element.y, element.x))
    lines = [element.line() for element in ordered]
    if sum(map(len, lines)) <= length:
        return head + "".join(lines)
    # The first and last elements mark where the page's content starts and ends; they go in first.
    chosen = {0, len(lines) - 1} if lines else set()
    used = sum(len(lines[index]) for index in chosen)
    for index in range(1, len(lines) - 1):
        if used + len(lines[index]) > length:
            break
        chosen.add(index)
        used += len(lines[index])
    if used > length:  # the two ends alone are too long: the budget holds what it can from the top
        chosen, used = set(), 0
        for index, line in enumerate(lines):
            if used + len(line) > length:
                break
            chosen.add(index)
            used += len(line)
    return head + "".join(lines[index] for index in sorted(chosen))
