"""A YAML written for ``oumi train`` with keys Oumi does not have (``model.name``, ``train:``): neither an Oumi
config ``is_oumi`` recognises nor a honing one. Told apart from a honing config with a misspelt key, so it is refused
as an Oumi config naming each key Oumi lacks, instead of being taken for a honing config."""

from __future__ import annotations

from typing import Any

from honing.config.schema import RunConfig
from honing.interop.configs.key_tables import key_table
from honing.interop.configs.translation import Translation

SOURCE, KEYS = key_table("oumi")

# honing's top-level keys that Oumi's TrainingConfig also has: a file may share these and still be Oumi's
SHARED_SECTIONS = ("model", "data")


def looks_like_oumi(raw: dict[str, Any]) -> bool:
    """An Oumi-shaped file: a ``model`` / ``data`` section (Oumi's and honing's alike) beside top-level keys honing
    lacks, no top-level key only honing has, and a key in a shared section that honing's section lacks too (so a
    honing config with a misspelt section name stays honing's, refused by honing's own check)."""
    honing_keys = set(RunConfig.model_fields)
    if not any(isinstance(raw.get(name), dict) for name in SHARED_SECTIONS):
        return False
    if any(key in honing_keys and key not in SHARED_SECTIONS for key in raw):
        return False
    if all(key in honing_keys for key in raw):
        return False
    for name in SHARED_SECTIONS:
        section = raw.get(name)
        fields = set(RunConfig.model_fields[name].annotation.model_fields)
        if isinstance(section, dict) and any(key not in fields for key in section):
            return True
    return False


def refuse_unknown_oumi_keys(raw: dict[str, Any]) -> Translation:
    """A translation refusing, one line each, the top-level keys and the sections' keys Oumi's schema lacks."""
    t = Translation("Oumi")
    where = f"Oumi's TrainingConfig ({SOURCE})"
    for key, value in raw.items():
        if key not in KEYS[""]:
            t.refuse(str(key), f"not a key of {where}; check its spelling")
        elif isinstance(value, dict) and key in KEYS:
            for name in value:
                if name not in KEYS[key]:
                    t.refuse(f"{key}.{name}", f"not a key of {where}'s {key} section; check its spelling")
    if not t.refused:  # every key is Oumi's: looks_like_oumi would not have sent it here
        raise ValueError("refuse_unknown_oumi_keys: every key of the file is Oumi's")
    return t
