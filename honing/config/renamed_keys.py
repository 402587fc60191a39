"""Config keys honing renamed: a config that still writes the old key is refused in one line naming the new one
(``honing.config.loading.describe_error``), instead of "unknown key" with a guess."""

from __future__ import annotations

#: old key path → the key path that replaced it, with the same options
RENAMED_KEYS = {
    # PDF-page transcription is honing's own feature; its section was named after the data's origin first
    "data.olmocr": "data.pdf_pages",
}


def renamed_key_message(key: str) -> str | None:
    """The one-line refusal of ``key`` when honing renamed it (what to write instead); None for any other key."""
    new = RENAMED_KEYS.get(key)
    if new is None:
        return None
    return f"{key}: renamed to {new} (the same options); write {new} instead"
