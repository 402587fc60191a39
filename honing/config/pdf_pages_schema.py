"""The ``data.pdf_pages`` section: how PDF-page transcription data becomes vision-language SFT rows, each a page's
image and an instruction answered by the page's text. It shapes the sources of format ``olmocr_pages`` (folders of
one-page PDFs each beside a markdown file with YAML front matter) and ``olmocr_batch`` (OpenAI batch responses
naming PDF pages), both named after the data's origin, olmOCR; each of olmOCR's pipeline steps is one option here."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from honing.config.section import Section


class PdfPagesSection(Section):
    """PDF pages as image + prompt → reply rows: the page (rendered at ``data.pdf_longest_side``), an
    instruction with the page's text-layer anchor text when asked, and the page's transcription as the reply."""

    anchor_text_len: int | None = Field(default=None, ge=-1)
    """Characters of the page's text layer (each text run and image with its position) put in the prompt, as
    olmOCR's ``target_anchor_text_len``; -1: the anchor says only that the page is one image; None: no anchor."""
    queries: list[str] = []
    """``olmocr_batch``: the OpenAI batch request files (paths or globs) the responses answer (olmOCR's
    ``query_glob_path``); a response whose ``custom_id`` they hold takes its prompt and page image from its request,
    as sent, instead of building them from the PDF page."""
    prompt: Literal["plain", "front_matter"] = "front_matter"
    """honing's instruction: ``plain`` asks for the page's text (olmOCR's ``FinetuningPrompt``), ``front_matter``
    asks for markdown under a front matter of the page's language, rotation, table and diagram fields (its
    ``NewYamlFinetuningPrompt*`` steps)."""
    prompt_text: str | None = Field(default=None, min_length=1)
    """The exact instruction, replacing honing's wording (where a model was trained on other words);
    ``{anchor_text}`` in it is replaced by the anchor text."""
    prompt_first: bool = False
    """The instruction before the page's image in the user turn (olmOCR's ``prompt_first``); false: image first."""
    reply: Literal["front_matter", "json"] = "front_matter"
    """``olmocr_pages``: the reply written as front matter + markdown (``FrontMatterOutputFormat``) or as one JSON
    object (``JSONOutputFormat``); ``olmocr_batch`` replies are the response's text as it is."""
    skip_rotated: bool = False
    """Leave out pages whose front matter says the rotation is invalid or needs a correction
    (``FilterOutRotatedDocuments``)."""
    text_rules: bool = False
    """Leave out pages whose text holds markdown tables, malformed HTML tables, set or calculus symbols outside
    tables, LaTeX formatting outside math or LaTeX tables (``DatasetTextRuleFilter``; equations are not rendered)."""
    latex_bold_italic: bool = False
    """``\\textbf{..}`` / ``\\textit{..}`` outside math become ``**..**`` / ``*..*`` (``ReformatLatexBoldItalic``)."""
    latex_brackets: bool = False
    """``$$..$$`` / ``$..$`` become ``\\[..\\]`` / ``\\(..\\)`` (``LatexBracketNormalizer``)."""
    tables: Literal["annotate_dims", "firstrowpreview"] | None = None
    """HTML tables get their row and column counts as attributes (``annotate_dims``) or a comment previewing their
    first full row (``firstrowpreview``), as olmOCR's ``TableTransformation``; None: as written."""
    rotation_probability: float = Field(default=0.0, ge=0.0, le=1.0)
    """The share of pages turned by 90, 180 or 270 degrees, their front matter saying the correction back
    (``RotationAugmentation``); drawn once per page from its file's name, where olmOCR draws again each epoch."""
    token_flip_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    """The share of reply tokens replaced by a random token (none of the tokenizer's special or added tokens, so
    never an image placeholder) and left out of the loss (``RandomTokenFlipper``); drawn once per row from its text."""
