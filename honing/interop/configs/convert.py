"""``honing convert FILE [-o OUT]``: a translated config as honing's YAML text, headed by comments (the defaults
filled in where the file says nothing, the notes), secrets left out (the environment gives them:
``AWS_SECRET_ACCESS_KEY``, ``WANDB_API_KEY``, ...)."""

from __future__ import annotations

import json
from typing import Any

import yaml

from honing.config import ConfigError, read_yaml, validate
from honing.config.redact import is_secret_key
from honing.interop.configs.dialects import translate_or_refuse
from honing.interop.configs.translation import Translation


def without_secrets(value: Any, path: str = "") -> tuple[Any, list[str]]:
    """A copy of ``value`` without secret keys, and the dotted paths of those left out."""
    if isinstance(value, dict):
        out, dropped = {}, []
        for key, item in value.items():
            child = f"{path}.{key}" if path else str(key)
            if is_secret_key(str(key)) and item is not None:
                dropped.append(child)
                continue
            out[key], inner = without_secrets(item, child)
            dropped += inner
        return out, dropped
    return value, []


def translation_yaml(translation: Translation, source: str) -> str:
    """The translated config as YAML text, headed by comments: where it came from, every default filled in (with
    whose default it is), the notes, secrets left out."""
    config, dropped = without_secrets(translation.config)
    lines = [f"# honing config translated from the {translation.dialect} config {source}"]
    if translation.defaults:
        lines.append(f"# defaults filled in where the file says nothing (what the {translation.dialect} run gets):")
        lines += [
            f"#   {path}: {json.dumps(translation.get(path))}  ({whose})"
            for path, whose in translation.defaults.items()
        ]
    lines += [f"# {note}" for note in translation.notes]
    lines += [f"# {path}: a secret, not written (set it in the environment or add it here)" for path in dropped]
    return "\n".join(lines) + "\n" + yaml.safe_dump(config, sort_keys=False)


def convert_file(path: str, out: str | None = None, dialect: str | None = None) -> str:
    """Translate the foreign config at ``path`` (written by ``dialect``, ``--from``, or as its shape says); write it
    to ``out`` when given; return the YAML text."""
    translation = translate_or_refuse(read_yaml(path), path, dialect)
    if translation is None:
        raise ConfigError(
            f"{path}: already a honing config (not an Oumi, olmOCR, axolotl, LLaMA-Factory or TRL one); nothing to "
            "convert"
        )
    validate(translation.config, source=f"{path} (translated)")  # refuse now what training would refuse later
    text = translation_yaml(translation, path)
    if out is not None:
        with open(out, "w", encoding="utf-8") as handle:
            handle.write(text)
    return text
