"""Other systems' config files read as honing's: an Oumi training config or an olmOCR TrainConfig YAML is
recognised by its shape and translated to honing's config (a plain dict that ``honing.config`` then validates).

A key the translation cannot honour is refused, one line per key naming it and why; a key honoured in honing's own
way (no key of its own) leaves a note.
"""

from __future__ import annotations

from typing import Any

from honing.config.errors import ConfigError
from honing.interop.configs.axolotl import is_axolotl, translate_axolotl
from honing.interop.configs.llamafactory import is_llamafactory, translate_llamafactory
from honing.interop.configs.olmocr import is_olmocr, translate_olmocr
from honing.interop.configs.olmocr_trainer import is_olmocr_trainer, translate_olmocr_trainer
from honing.interop.configs.oumi import is_oumi, translate_oumi
from honing.interop.configs.translation import Translation


def detect_dialect(raw: dict[str, Any]) -> str | None:
    """``"oumi"``, ``"olmocr"``, ``"olmocr_trainer"``, ``"axolotl"``, ``"llamafactory"`` or None (a honing config) by
    the sections or keys a config has."""
    if is_olmocr_trainer(raw):  # before Oumi's: it has model and training sections too
        return "olmocr_trainer"
    if is_olmocr(raw):
        return "olmocr"
    if is_oumi(raw):
        return "oumi"
    if is_axolotl(raw):
        return "axolotl"
    if is_llamafactory(raw):
        return "llamafactory"
    return None


def translate(raw: dict[str, Any], source: str | None = None) -> Translation | None:
    """The translation of a foreign config, refusals included; None for a honing config. ``source``: the file's
    path, where files it names (a DeepSpeed JSON, LLaMA-Factory's dataset_info.json) are also looked for."""
    dialect = detect_dialect(raw)
    if dialect == "oumi":
        return translate_oumi(raw)
    if dialect == "olmocr":
        return translate_olmocr(raw)
    if dialect == "olmocr_trainer":
        return translate_olmocr_trainer(raw)
    if dialect == "axolotl":
        return translate_axolotl(raw, source)
    if dialect == "llamafactory":
        return translate_llamafactory(raw, source)
    return None


def translate_or_refuse(raw: dict[str, Any], source: str) -> Translation | None:
    """``translate``, raising one ConfigError line that lists every refused key when any is refused."""
    try:
        translation = translate(raw, source)
    except RecursionError:  # a YAML anchor that contains itself (&a [*a]): no config means that
        raise ConfigError(f"{source}: a YAML anchor refers to itself; expected a config of plain values") from None
    if translation is not None and translation.refused:
        raise ConfigError(
            f"{source}: read as an {translation.dialect} config; cannot honour: " + "; ".join(translation.refused)
        )
    return translation
