"""A translated config as honing's YAML text: notes as comments, secrets left out (the environment gives them:
``AWS_SECRET_ACCESS_KEY``, ``WANDB_API_KEY``, ...)."""

from __future__ import annotations

from typing import Any

import yaml

from honing.config.foreign.translation import Translation
from honing.config.redact import is_secret_key


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
    """The translated config as YAML text, headed by comments: where it came from, the notes, secrets left out."""
    config, dropped = without_secrets(translation.config)
    lines = [f"# honing config translated from the {translation.dialect} config {source}"]
    lines += [f"# {note}" for note in translation.notes]
    lines += [f"# {path}: a secret, not written (set it in the environment or add it here)" for path in dropped]
    return "\n".join(lines) + "\n" + yaml.safe_dump(config, sort_keys=False)
