"""A user's config file as honing's run config, whichever system wrote it: an Oumi, olmOCR, axolotl, LLaMA-Factory or
TRL CLI config is translated to honing's first (the translation logged), then the dotted overrides apply and
``honing.config`` validates."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from honing.config import ConfigError, RunConfig, apply_overrides, read_yaml, validate
from honing.interop.configs.convert import translation_yaml
from honing.interop.configs.dialects import translate_or_refuse

log = logging.getLogger(__name__)


def load_any_config(path: str | None, overrides: Iterable[str] = (), dialect: str | None = None) -> RunConfig:
    """Read ``path`` (honing's YAML, or an Oumi, olmOCR, axolotl, LLaMA-Factory or TRL CLI config translated to it),
    apply the overrides (``key.path=value``, ``~key.path``: honing's keys), validate; what ``honing train`` and the
    other verbs read a config file with. ``dialect``: ``--from``, the system that wrote the file."""
    if dialect is not None and not path:
        raise ConfigError(f"--from {dialect}: give the config file it names")
    raw = translated(read_yaml(path), path, dialect) if path else {}
    apply_overrides(raw, overrides)
    return validate(raw, source=path or "<overrides>")


def translated(raw: dict[str, Any], path: str, dialect: str | None = None) -> dict[str, Any]:
    """honing's config for a foreign one (logged with its notes, secrets redacted); ``raw`` itself otherwise."""
    translation = translate_or_refuse(raw, path, dialect)
    if translation is None:
        return raw
    log.info(
        "%s: read as an %s config, translated to honing's:\n%s",
        path,
        translation.dialect,
        translation_yaml(translation, path).rstrip(),
    )
    return translation.config
