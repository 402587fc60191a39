"""Other systems' config files read as honing's: an Oumi training config or an olmOCR TrainConfig YAML is
recognised by its shape and translated to honing's config (a plain dict that ``honing.config`` then validates).
``--from NAME`` (``FROM_NAMES``) names the system where the shape does not say it: a TRL CLI file does not say its
trainer (``--from trl-dpo``).

A key the translation cannot honour is refused, one line per key naming it and why; a key honoured in honing's own
way (no key of its own) leaves a note.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from honing.config.errors import ConfigError
from honing.interop.configs.axolotl import is_axolotl, translate_axolotl
from honing.interop.configs.hf_engines import follow_peft_target_rule
from honing.interop.configs.llamafactory import is_llamafactory, translate_llamafactory
from honing.interop.configs.olmocr import is_olmocr, translate_olmocr
from honing.interop.configs.olmocr_trainer import is_olmocr_trainer, translate_olmocr_trainer
from honing.interop.configs.oumi import is_oumi, translate_oumi
from honing.interop.configs.oumi_shape import looks_like_oumi, refuse_unknown_oumi_keys
from honing.interop.configs.translation import Translation
from honing.interop.configs.trl_cli import COMMANDS, is_trl_cli, translate_trl_cli, trl_command

# --from NAME -> the translator of that system's file (``raw``, ``source``)
TRANSLATORS: dict[str, Callable[[dict[str, Any], str | None], Translation]] = {
    "oumi": lambda raw, source: translate_oumi(raw),
    "olmocr": lambda raw, source: translate_olmocr(raw),
    "olmocr_trainer": lambda raw, source: translate_olmocr_trainer(raw),
    "axolotl": translate_axolotl,
    "llamafactory": translate_llamafactory,
    **{name: (lambda raw, source, name=name: translate_trl_cli(raw, name)) for name in COMMANDS},
}
FROM_NAMES = tuple(TRANSLATORS)


def detect_dialect(raw: dict[str, Any]) -> str | None:
    """``"oumi"``, ``"olmocr"``, ``"olmocr_trainer"``, ``"axolotl"``, ``"llamafactory"``, ``"trl"`` or None (a honing
    config) by the sections or keys a config has."""
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
    if is_trl_cli(raw):  # after LLaMA-Factory's: both have model_name_or_path
        return "trl"
    return None


def translate(raw: dict[str, Any], source: str | None = None, dialect: str | None = None) -> Translation | None:
    """The translation of a foreign config, refusals included; None for a honing config. ``source``: the file's
    path, where files it names (a DeepSpeed JSON, LLaMA-Factory's dataset_info.json) are also looked for.
    ``dialect``: a ``FROM_NAMES`` name (``--from``), else the file's shape says it (a TRL CLI file's trainer from
    keys only one trainer has, or a ConfigError asking for ``--from``)."""
    if dialect is not None:
        if dialect not in TRANSLATORS:
            raise ConfigError(f"--from {dialect}: expected one of {', '.join(FROM_NAMES)}")
        found: str | None = dialect
    else:
        found = detect_dialect(raw)
        if found == "trl":
            found = trl_command(raw, source or "<config>")
        if found is None and looks_like_oumi(raw):  # written for `oumi train` with keys Oumi lacks: name them
            return refuse_unknown_oumi_keys(raw)
    if found is None:
        return None
    translation = TRANSLATORS[found](raw, source)
    follow_peft_target_rule(translation)
    return translation


def translate_or_refuse(raw: dict[str, Any], source: str, dialect: str | None = None) -> Translation | None:
    """``translate``, raising one ConfigError line that lists every refused key when any is refused."""
    try:
        translation = translate(raw, source, dialect)
    except RecursionError:  # a YAML anchor that contains itself (&a [*a]): no config means that
        raise ConfigError(f"{source}: a YAML anchor refers to itself; expected a config of plain values") from None
    if translation is not None and translation.refused:
        raise ConfigError(
            f"{source}: read as an {translation.dialect} config; cannot honour: " + "; ".join(translation.refused)
        )
    return translation
