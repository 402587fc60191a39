"""One olmOCR page as honing sees it: the fields of its front matter and its transcription, read from a markdown
file, and written back as the reply olmOCR trains on (front matter + markdown, or one JSON object)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import yaml

from honing.data.formats import RowError

ROTATIONS = (0, 90, 180, 270)


@dataclass(frozen=True)
class PageReply:
    """olmOCR's ``PageResponse``: the page's language, rotation, table and diagram flags and its natural text."""

    primary_language: str | None
    is_rotation_valid: bool
    rotation_correction: int
    is_table: bool
    is_diagram: bool
    natural_text: str | None

    def replace(self, **changes: object) -> PageReply:
        """A copy with ``changes``."""
        return dataclasses.replace(self, **changes)

    def front_matter(self) -> str:
        """The reply as olmOCR's ``FrontMatterOutputFormat`` writes it: the fields, then the text."""
        fields = "".join(f"{name}: {getattr(self, name)}\n" for name in FIELDS)
        return f"---\n{fields}---\n{(self.natural_text or '').strip()}".strip()

    def json(self) -> str:
        """The reply as one JSON object (olmOCR's ``JSONOutputFormat``)."""
        return json.dumps({name: getattr(self, name) for name in (*FIELDS, "natural_text")}, ensure_ascii=False)


FIELDS = ("primary_language", "is_rotation_valid", "rotation_correction", "is_table", "is_diagram")


def split_front_matter(markdown: str) -> tuple[dict, str]:
    """The YAML front matter between the first two ``---`` lines, and the text after it (stripped); no front
    matter: ``({}, text)``."""
    if markdown.startswith("---\n"):
        end = markdown.find("\n---", 4)
        if end != -1:
            try:
                fields = yaml.safe_load(markdown[4:end]) or {}
            except yaml.YAMLError as error:
                raise RowError(f"the front matter is not YAML ({str(error).splitlines()[0]})") from None
            if not isinstance(fields, dict):
                raise RowError(f"the front matter is {type(fields).__name__}, expected key: value lines")
            return fields, markdown[end + 4 :].strip()
    return {}, markdown.strip()


def parse_page(markdown: str) -> PageReply:
    """A page's markdown as its reply fields; a missing, extra or mistyped field is a RowError naming it."""
    fields, text = split_front_matter(markdown)
    missing = [name for name in FIELDS if name not in fields]
    if missing:
        raise RowError(f"the front matter lacks {', '.join(missing)} (expected {', '.join(FIELDS)})")
    extra = sorted(set(fields) - set(FIELDS))
    if extra:
        raise RowError(f"the front matter has unexpected field(s) {', '.join(map(str, extra))}")
    language = fields["primary_language"]
    if isinstance(language, bool) or not language:  # YAML reads a bare `no` (Norwegian) or `null` so
        language = None
    elif not isinstance(language, str):
        raise RowError(f"primary_language is {language!r}, expected a language code or null")
    flags = {name: as_bool(name, fields[name]) for name in ("is_rotation_valid", "is_table", "is_diagram")}
    rotation = fields["rotation_correction"]
    try:
        rotation = int(rotation) if not isinstance(rotation, bool) else None
    except (TypeError, ValueError):
        rotation = None
    if rotation not in ROTATIONS:
        raise RowError(f"rotation_correction is {fields['rotation_correction']!r}, expected one of 0, 90, 180, 270")
    return PageReply(language, rotation_correction=rotation, natural_text=text or None, **flags)


def as_bool(name: str, value: object) -> bool:
    """A front matter flag: a YAML bool, or the words true / false."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise RowError(f"{name} is {value!r}, expected true or false")
