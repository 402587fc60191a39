"""honing's own instructions for olmOCR-style training: what the user turn asks of a page (``data.pdf_pages.prompt``),
with the page's anchor text where the run asks for it. ``data.pdf_pages.prompt_text`` replaces these words exactly."""

from __future__ import annotations

ANCHOR_SLOT = "{anchor_text}"

PLAIN = (
    "This image is one page of a document. Write out all of the page's text in the order a person would read it, "
    "adding nothing that is not on the page."
)
FRONT_MATTER = (
    "This image is one page of a document. Transcribe it as markdown in the order a person would read it, with "
    "equations in LaTeX and tables in HTML; mark each figure or chart as ![what it shows](page_x_y_width_height.png). "
    "Start with a YAML front matter block that gives primary_language, is_rotation_valid, rotation_correction, "
    "is_table and is_diagram."
)
WITH_ANCHOR = (
    "\nThe page's PDF text layer, each run with its position, may help:\n<text_layer>\n{anchor_text}\n</text_layer>"
)


def instruction(style: str, exact: str | None, anchor: str | None) -> str:
    """The user turn's text: ``exact`` (its ``{anchor_text}`` filled in) or honing's words for ``style``
    (``plain`` / ``front_matter``), followed by the anchor text when there is one."""
    if exact is not None:
        return exact.replace(ANCHOR_SLOT, anchor or "")
    words = PLAIN if style == "plain" else FRONT_MATTER
    return words if anchor is None else words + WITH_ANCHOR.replace(ANCHOR_SLOT, anchor.rstrip("\n"))
