"""Where a command line's CONFIG is found: a file path as given, else a packaged example config by its name.

An installed wheel carries the repository's ``configs/`` as ``honing/_configs`` (setup.py); a source tree has them in
its ``configs/``. ``honing train sft-full`` (or ``sft-full.yaml``, or ``configs/sft-full.yaml`` typed from another
folder, as the README writes it) runs that packaged file when no such file exists where the command runs."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from honing.errors import ConfigError
from honing.example_outputs import EXAMPLE_CONFIGS

log = logging.getLogger(__name__)

QUICKSTART = EXAMPLE_CONFIGS / "quickstart.yaml"
CONFIG_SUFFIXES = (".yaml", ".yml")


def split_config_and_overrides(config: str | None, overrides: list[str]) -> tuple[str, list[str]]:
    """``honing train key=value`` (no file) means the quickstart with those overrides."""
    if config is None or ("=" in config and not os.path.exists(config)):
        return str(QUICKSTART), ([config] if config else []) + overrides
    return config, overrides


def packaged_config_names() -> list[str]:
    """The names of the top-level example configs (``quickstart``, ``sft-full``, ...), sorted."""
    return sorted(path.stem for path in EXAMPLE_CONFIGS.glob("*.yaml"))


def find_config(name: str | None) -> str | None:
    """``name`` itself when it exists here (or is None, a URL or a ``key=value`` override), else the packaged config
    it names; a bare name that is neither is a one-line ConfigError listing the packaged names."""
    if name is None or os.path.exists(name) or "://" in name or ("=" in name and not name.endswith(CONFIG_SUFFIXES)):
        return name
    packaged = packaged_config(name)
    if packaged is not None:
        log.info("CONFIG %s: the packaged %s", name, packaged)
        return str(packaged)
    if "/" in name.removeprefix("configs/") or os.path.isabs(name):
        return name  # a path into a folder: the loader names the missing file
    raise ConfigError(
        f"CONFIG: no file {name!r} here and no packaged config of that name; the packaged configs: "
        f"{', '.join(packaged_config_names())} (and the presets under models/, e.g. models/qwen2.5/"
        "qwen2.5-7b-lora-24gb); or give the path of a YAML file"
    )


def packaged_config(name: str) -> Path | None:
    """The packaged config ``name`` names (``sft-full``, ``sft-full.yaml``, ``configs/sft-full.yaml``,
    ``models/qwen2.5/qwen2.5-7b-lora-24gb``), or None."""
    if os.path.isabs(name):
        return None
    relative = name.removeprefix("configs/")
    candidates = [relative] if relative.endswith(CONFIG_SUFFIXES) else [relative + suffix for suffix in CONFIG_SUFFIXES]
    root = EXAMPLE_CONFIGS.resolve()
    for candidate in candidates:
        path = (root / candidate).resolve()
        if path.is_file() and path.is_relative_to(root):  # never a file outside the packaged configs (../..)
            return path
    return None
