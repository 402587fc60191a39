"""olmOCR's data read as image + prompt → reply conversations for VL-SFT, its pipeline steps as the options of
``data.pdf_pages`` (``honing.config.pdf_pages_schema``); ``OLMOCR_SOURCES`` is the reader ``honing.interop``
registers for both formats (``honing.data.vision.source_formats``). Two layouts, one per olmOCR generation:

- ``format: olmocr_pages`` (olmOCR's current trainer): a folder, searched below, of one-page PDFs each beside a
  markdown file of the same name whose YAML front matter holds the page's fields (``primary_language``,
  ``is_rotation_valid``, ``rotation_correction``, ``is_table``, ``is_diagram``) and whose body is its text.
- ``format: olmocr_batch`` (olmOCR's ``TrainConfig``): OpenAI batch API responses (JSONL or JSON, a file, folder or
  glob), each naming its page in ``custom_id`` as ``PDF-PAGE`` (``s3://bucket/doc.pdf-3``; a relative PDF path is
  relative to the response file) and holding the reply in ``response.body.choices[0].message.content``; a response
  that did not finish (``finish_reason`` other than ``stop``) is left out, as olmOCR leaves it out.

Each row's user turn is the page (a ``pdf`` item, rendered at ``data.pdf_longest_side`` when batched) and the
instruction; its assistant turn is the reply. A row that cannot be read is a bad row naming its file (and line).
"""

from __future__ import annotations

import base64
import io
import logging
import os
import random
import zlib
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from honing import storage
from honing.config.pdf_pages_schema import PdfPagesSection
from honing.config.schema import DataSection
from honing.data.formats import ContentItem, Conversation, Message, RowError
from honing.data.report import BadRowReport
from honing.data.row_reader import iter_records
from honing.data.sources import source_fields
from honing.data.vision.images import ImageError, load_image
from honing.data.vision.source_formats import Found, Row
from honing.errors import ConfigError, DataError
from honing.interop.olmocr_anchor import anchor_text
from honing.interop.olmocr_pages import PageReply, parse_page
from honing.interop.olmocr_prompts import instruction
from honing.interop.olmocr_text import broken_rule, latex_bold_italic, latex_brackets, transform_tables
from honing.losses import IGNORE_INDEX

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

OLMOCR_FORMATS = ("olmocr_pages", "olmocr_batch")
#: one page's conversation, built when called (None: a pipeline step left the page out)
PageBuild = Callable[[], "Conversation | None"]


class OlmocrSources:
    """The reader of olmOCR's source formats, shaped by ``data.pdf_pages`` (a ``SourceFormatReader``)."""

    formats = OLMOCR_FORMATS

    def read(self, source: Mapping[str, Any], index: int, data: DataSection, report: BadRowReport) -> Found:
        """One olmOCR source's conversations, through its own ``pdf_pages`` where given, else ``data.pdf_pages``
        (its defaults when neither is)."""
        own = source.get("pdf_pages")
        options = PdfPagesSection(**own) if own is not None else data.pdf_pages or PdfPagesSection()
        reader = OlmocrReader(options, pdf_longest_side=data.pdf_longest_side, bad_rows=data.bad_rows)
        return reader.read({key: value for key, value in source.items() if key != "pdf_pages"}, index, report)

    def check(self, data: DataSection) -> None:
        """``data.pdf_pages`` shapes the rows of olmOCR's sources only: given with none of them, or a source's own on
        a source of another format, it would change nothing, so it is refused."""
        splits = [split for split in (data.train, data.validation) if split is not None]
        for split, name in ((data.train, "train"), (data.validation, "validation")):
            for index, source in enumerate(split.sources if split is not None else []):
                if source.pdf_pages is not None and source.format not in OLMOCR_FORMATS:
                    raise ConfigError(
                        f"data.{name}.sources[{index}].pdf_pages: read by sources of format "
                        f"{' / '.join(OLMOCR_FORMATS)}, not {source.format!r}; set its format or remove pdf_pages"
                    )
                if source.pdf_pages is not None and "token_flip_rate" in source.pdf_pages.model_fields_set:
                    raise ConfigError(
                        f"data.{name}.sources[{index}].pdf_pages.token_flip_rate: a run-wide setting; give it in "
                        "data.pdf_pages"
                    )
        if data.pdf_pages is None:
            return
        if not any(source.format in OLMOCR_FORMATS for split in splits for source in split.sources):
            raise ConfigError(
                f"data.pdf_pages: read by sources of format {' / '.join(OLMOCR_FORMATS)}, and no source has one; set "
                "their format or remove data.pdf_pages"
            )

    def settings(self, data: DataSection) -> dict[str, object]:
        """``data.pdf_pages`` as the rows' cache key holds it; only when set, so other runs keep their keys."""
        # the entry keeps the section's former name, so rows cached before it was renamed are still found
        return {"olmocr": data.pdf_pages.model_dump()} if data.pdf_pages is not None else {}

    def transform_rows(
        self, rows: list[Row | Exception], data: DataSection, tokenizer: PreTrainedTokenizerBase
    ) -> list[Row | Exception]:
        """The replies' tokens flipped at ``data.pdf_pages.token_flip_rate`` (``flip_reply_tokens``)."""
        if data.pdf_pages is None or not data.pdf_pages.token_flip_rate:
            return rows
        return flip_reply_tokens(rows, data.pdf_pages.token_flip_rate, tokenizer)


#: the instance ``honing.interop.registrations`` registers for ``OLMOCR_FORMATS``
OLMOCR_SOURCES = OlmocrSources()


class OlmocrReader:
    """olmOCR's rows of one source, through the options of ``data.pdf_pages``."""

    def __init__(self, options: PdfPagesSection, *, pdf_longest_side: int | None, bad_rows: str):
        self.options, self.pdf_longest_side, self.bad_rows = options, pdf_longest_side, bad_rows
        self.left_out: dict[str, int] = {}  # why a page was left out (a filter, not a bad row) → how many
        self._requests: dict[str, tuple[ContentItem, ContentItem]] | None = None

    def read(self, source: Mapping[str, Any], index: int, report: BadRowReport) -> Found:
        """The source's conversations, at most ``max_samples``; bad rows fail or are counted in ``report``."""
        fields = source_fields({key: value for key, value in source.items() if key != "name"}, index)
        path, limit = fields["path"], fields["max_samples"]
        if fields["subset"] is not None:  # olmOCR's layouts are files and folders, never a dataset's configuration
            raise DataError(f"data source {index} ({path!r}): subset is not read by format {fields['format']!r}")
        if fields["sample_seed"] is not None:  # a random subset would render every page to choose among them
            raise DataError(
                f"data source {index} ({path!r}): sample_seed is not read by format {fields['format']!r} (it takes "
                "the first max_samples pages); remove sample_seed"
            )
        pages = self.page_rows(path) if fields["format"] == "olmocr_pages" else self.batch_rows(path)
        found: Found = []
        for origin, build in pages:
            try:
                conversation = build()
            except (RowError, ImageError) as error:
                reason = error.reason if isinstance(error, RowError) else str(error)
                if self.bad_rows == "fail":
                    raise DataError(f"{origin}: {reason}") from None
                report.add(path, origin, reason)
                continue
            if conversation is None:
                continue
            found.append((conversation, origin))
            if len(found) == limit:
                break
        if self.left_out:
            why = ", ".join(f"{count} {reason}" for reason, count in self.left_out.items())
            log.info("data source %d (%r): left out by data.pdf_pages: %s", index, path, why)
        if not found:
            raise DataError(
                f"data source {index} ({path!r}) holds no olmOCR pages"
                + (f" (left out: {self.left_out})" if self.left_out else "")
                + (f"; {report.summary()}" if report.per_source.get(path) else "")
            )
        return found

    # --- the two layouts -------------------------------------------------------------------------------------
    def page_rows(self, folder: str) -> Iterator[tuple[str, PageBuild]]:
        """``(origin, build)`` per markdown file below ``folder``, sorted (olmOCR's ``root_dir``)."""
        if storage.is_url(folder) or not os.path.isdir(folder):
            raise DataError(f"{folder!r}: format olmocr_pages reads a local folder of .pdf and .md files")
        markdown = sorted(
            os.path.join(parent, name)
            for parent, _, names in os.walk(folder)
            for name in names
            if name.endswith(".md") and not name.startswith(".")
        )
        if not markdown:
            raise DataError(f"{folder!r} holds no .md files; format olmocr_pages reads PDF + markdown pairs")
        for path in markdown:
            yield path, lambda path=path: self.page_row(path)

    def page_row(self, markdown_path: str) -> Conversation | None:
        """One page of the current layout: its PDF beside it, its reply from the markdown."""
        pdf = markdown_path[: -len(".md")] + ".pdf"
        if not os.path.exists(pdf):
            raise RowError(f"no PDF beside it (expected {os.path.basename(pdf)})")
        try:
            with open(markdown_path, encoding="utf-8") as file:
                page = parse_page(file.read())
        except UnicodeDecodeError as error:
            raise RowError(f"not valid UTF-8 ({error.reason} at byte {error.start})") from None
        page = self.transcription(page)
        if page is None:
            return None
        page_item = ContentItem(type="pdf", content=os.path.abspath(pdf), page=1)
        image, page = self.rotated(page_item, page, markdown_path)
        reply = page.json() if self.options.reply == "json" else page.front_matter()
        return self.conversation(page_item, image, reply)

    def batch_rows(self, path: str) -> Iterator[tuple[str, PageBuild]]:
        """``(origin, build)`` per OpenAI batch response under ``path``; an unreadable line is a bad row."""
        bad: list[tuple[str, str]] = []
        for record in iter_records(path, on_bad_row=lambda origin, reason: bad.append((origin, reason))):
            while bad:
                origin, reason = bad.pop(0)
                yield origin, lambda reason=reason: raise_row_error(reason)
            yield record.origin, lambda record=record: self.batch_row(record.row, record.folder)
        for origin, reason in bad:
            yield origin, lambda reason=reason: raise_row_error(reason)

    def batch_row(self, row: Mapping[str, Any], folder: str | None) -> Conversation | None:
        """One response of the TrainConfig layout: the page its ``custom_id`` names, its reply as written."""
        pdf, page = page_of(row.get("custom_id"), folder)
        choices = (((row.get("response") or {}).get("body") or {}).get("choices")) if isinstance(row, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise RowError("no response.body.choices[0] (expected an OpenAI batch API response)")
        if choices[0].get("finish_reason") != "stop":
            self.leave_out(f"finish_reason {choices[0].get('finish_reason')!r}")
            return None
        reply = (choices[0].get("message") or {}).get("content")
        if not isinstance(reply, str) or not reply:
            raise RowError("response.body.choices[0].message.content holds no text")
        request = self.requests().get(row.get("custom_id"))
        if request is not None:  # the prompt and image as they were sent (olmOCR's query_glob_path)
            text, image = request
            user = [text, image] if self.options.prompt_first else [image, text]
            return Conversation(messages=[Message(role="user", content=user), Message(role="assistant", content=reply)])
        page_item = ContentItem(type="pdf", content=page_file(pdf), page=page)
        return self.conversation(page_item, page_item, reply)

    def requests(self) -> dict[str, tuple[ContentItem, ContentItem]]:
        """``custom_id`` → the user turn's text and image of each request in ``data.pdf_pages.queries`` (read once)."""
        if self._requests is None:
            self._requests = {}
            for path in self.options.queries:
                for record in iter_records(path):
                    request = request_items(record.row)
                    if request is None:
                        raise DataError(f"{record.origin}: not an OpenAI batch request with a text and an image")
                    self._requests[str(record.row["custom_id"])] = request
        return self._requests

    # --- the pipeline's steps --------------------------------------------------------------------------------
    def transcription(self, page: PageReply) -> PageReply | None:
        """The text steps in olmOCR's order: filters first, then rewrites; None when a filter leaves it out."""
        options = self.options
        if options.skip_rotated and (not page.is_rotation_valid or page.rotation_correction != 0):
            return self.leave_out("rotated")
        text = page.natural_text
        if text and options.latex_bold_italic:
            text = latex_bold_italic(text)
        if text and options.text_rules:
            reason = broken_rule(text)
            if reason is not None:
                return self.leave_out(f"by text_rules ({reason})")
        if text and options.tables:
            text = transform_tables(text, options.tables)
        if text and options.latex_brackets:
            text = latex_brackets(text)
        return page.replace(natural_text=text)

    def rotated(self, item: ContentItem, page: PageReply, name: str) -> tuple[ContentItem, PageReply]:
        """The page turned by 90, 180 or 270 degrees for ``rotation_probability`` of pages (drawn from the file's
        name), its reply saying the correction back; else as it is."""
        chance = self.options.rotation_probability
        draw = random.Random(zlib.crc32(os.path.basename(name).encode()))
        if not chance or draw.random() >= chance:
            return item, page
        turn = draw.choice((90, 180, 270))  # counter-clockwise, as PIL turns; the correction turns it back
        image = load_image(item, pdf_longest_side=self.pdf_longest_side).rotate(turn, expand=True)
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        encoded = base64.b64encode(buffer.getvalue()).decode("ascii")
        page = page.replace(is_rotation_valid=False, rotation_correction=(360 - turn) % 360)
        return ContentItem(type="image_base64", content=encoded), page

    def conversation(self, page_item: ContentItem, image: ContentItem, reply: str) -> Conversation:
        """The user turn (image and instruction, in the configured order) and the reply."""
        options = self.options
        anchor = None
        if options.anchor_text_len is not None:
            anchor = anchor_text(page_item.content, page_item.page, options.anchor_text_len)
        text = ContentItem(type="text", content=instruction(options.prompt, options.prompt_text, anchor))
        user = [text, image] if options.prompt_first else [image, text]
        return Conversation(messages=[Message(role="user", content=user), Message(role="assistant", content=reply)])

    def leave_out(self, reason: str) -> None:
        """Count a page left out by a step (not a bad row) and return None."""
        self.left_out[reason] = self.left_out.get(reason, 0) + 1


def page_of(custom_id: object, folder: str | None) -> tuple[str, int]:
    """The PDF and 1-based page a batch request's ``custom_id`` (``PDF-PAGE``) names."""
    if not isinstance(custom_id, str) or "-" not in custom_id:
        raise RowError(f"custom_id is {custom_id!r}, expected 'PDF-PAGE' such as 's3://bucket/doc.pdf-3'")
    pdf, _, page = custom_id.rpartition("-")
    if not page.isdigit() or int(page) < 1 or not pdf:
        raise RowError(f"custom_id {custom_id!r} does not end in '-PAGE' with a page number >= 1")
    if not storage.is_url(pdf) and not os.path.isabs(pdf) and folder is not None and "://" not in folder:
        pdf = os.path.join(folder, pdf)
    return pdf, int(page)


def page_file(pdf: str) -> str:
    """The PDF a response names, checked to exist when it is local."""
    if not storage.is_url(pdf) and not os.path.exists(pdf):
        raise RowError(f"the PDF {pdf!r} named by custom_id does not exist")
    return pdf


def request_items(row: object) -> tuple[ContentItem, ContentItem] | None:
    """The text and the image (a data URL) of a batch request's user message, or None when it lacks one."""
    if not isinstance(row, dict) or not isinstance(row.get("custom_id"), str):
        return None
    text = image = None
    for message in (row.get("body") or {}).get("messages") or []:
        if isinstance(message, dict) and message.get("role") == "user" and isinstance(message.get("content"), list):
            for part in message["content"]:
                if not isinstance(part, dict):
                    continue
                if part.get("type") == "text" and isinstance(part.get("text"), str):
                    text = ContentItem(type="text", content=part["text"])
                url = (part.get("image_url") or {}).get("url") if part.get("type") == "image_url" else None
                if isinstance(url, str) and url.startswith("data:image"):
                    image = ContentItem(type="image_url", content=url)
    return (text, image) if text is not None and image is not None else None


def raise_row_error(reason: str) -> None:
    """Raise a line that could not be read as a bad row of its own."""
    raise RowError(reason)


def flip_reply_tokens(
    rows: list[Row | Exception], rate: float, tokenizer: PreTrainedTokenizerBase
) -> list[Row | Exception]:
    """olmOCR's ``RandomTokenFlipper``: each reply token (a label in the loss) is, at ``rate``, replaced in the
    input by a random plain token and left out of the loss, so the model learns to read past a wrong token.
    Drawn once per row from its text; rows that are errors pass through."""
    # Every added token is left out, not only the named special ones: a tokenizer may add its image placeholder
    # (Qwen-VL's <|image_pad|>) without listing it as special, and a reply token turned into one is an image token
    # with no image, which the batch's image-token check refuses (olmOCR's tokenizers list theirs as special).
    special = set(tokenizer.all_special_ids) | set(getattr(tokenizer, "added_tokens_decoder", {}))
    choices = [token for token in range(len(tokenizer)) if token not in special]
    for row in rows:
        if isinstance(row, Exception):
            continue
        draw = random.Random(zlib.crc32(row["text"].encode()))
        ids, labels = list(row["input_ids"]), list(row["labels"])
        for position, label in enumerate(labels):
            if label != IGNORE_INDEX and draw.random() < rate:
                ids[position], labels[position] = draw.choice(choices), IGNORE_INDEX
        row["input_ids"], row["labels"] = ids, labels
    return rows
