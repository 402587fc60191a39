"""``honing convert FILE [-o OUT]``: an Oumi or olmOCR config written as a honing YAML."""

from __future__ import annotations

from honing.config.errors import ConfigError
from honing.config.foreign import translate_or_refuse
from honing.config.foreign.convert import translation_yaml
from honing.config.loading import read_yaml, validate


def convert_file(path: str, out: str | None = None) -> str:
    """Translate the foreign config at ``path``; write it to ``out`` when given; return the YAML text."""
    raw = read_yaml(path)
    translation = translate_or_refuse(raw, path)
    if translation is None:
        raise ConfigError(f"{path}: already a honing config (no Oumi or olmOCR sections found); nothing to convert")
    validate(translation.config, source=f"{path} (translated)")  # refuse now what training would refuse later
    text = translation_yaml(translation, path)
    if out is not None:
        with open(out, "w", encoding="utf-8") as handle:
            handle.write(text)
    return text
