"""Which example writes a local model folder: the examples chain (LoRA starts from the quickstart's export, GRPO from
SFT's), so a missing input is named with the command that makes it, in one line, before any hub call."""

from __future__ import annotations

import functools
import os
from pathlib import Path

# An installed wheel carries the example configs as honing/_configs (setup.py); a source tree has them in its configs/.
PACKAGED_CONFIGS = Path(__file__).resolve().parent / "_configs"
EXAMPLE_CONFIGS = PACKAGED_CONFIGS if PACKAGED_CONFIGS.is_dir() else PACKAGED_CONFIGS.parent.parent / "configs"
#: the folders a honing run exports its model to, at the end (hf) and for its best checkpoint (best)
EXPORT_FOLDERS = ("hf", "best")
#: examples that are scripts, not configs: the folder each writes by default → the script (its runs' exports under it)
EXAMPLE_SCRIPTS = {"runs/tool_grpo": "examples/tool_grpo.py"}


@functools.cache
def example_save_folders() -> dict[str, str]:
    """Each example config (``configs/*.yaml``) → its ``trainer.save_folder``, as the file writes it."""
    import yaml

    folders: dict[str, str] = {}
    for path in sorted(EXAMPLE_CONFIGS.glob("*.yaml")):
        with open(path, encoding="utf-8") as handle:
            raw = yaml.safe_load(handle) or {}
        save_folder = (raw.get("trainer") or {}).get("save_folder") if isinstance(raw, dict) else None
        if isinstance(save_folder, str):
            folders[str(path)] = save_folder
    return folders


def producing_config(path: str) -> str | None:
    """The example config whose run exports ``path`` (its ``trainer.save_folder`` + ``/hf`` or ``/best``), or None."""
    save_folder, name = os.path.split(os.path.normpath(path))
    if name not in EXPORT_FOLDERS or not save_folder:
        return None
    wanted = os.path.abspath(save_folder)
    for config, folder in example_save_folders().items():
        if os.path.abspath(folder) == wanted:
            return config
    return None


def producing_script(path: str) -> str | None:
    """The example script that writes ``path`` under its default folder, or None."""
    wanted = os.path.abspath(path)
    for folder, script in EXAMPLE_SCRIPTS.items():
        if wanted.startswith(os.path.abspath(folder) + os.sep):
            return script
    return None


def moved_example(path: str) -> tuple[str, str] | None:
    """``(config, its save_folder)`` when ``path`` is ``runs/NAME/hf`` and ``configs/NAME.yaml`` now saves elsewhere:
    the chained config still names the old folder."""
    save_folder, name = os.path.split(os.path.normpath(path))
    if name not in EXPORT_FOLDERS or not save_folder:
        return None
    for config, folder in example_save_folders().items():
        if Path(config).stem == os.path.basename(save_folder):
            return config, folder
    return None


def looks_like_example_output(path: str) -> bool:
    """True when ``path`` is where an example (config or script) writes, or under honing's ``runs/`` folder: a local
    path, never a hub name, even where no such folder exists yet."""
    first = os.path.normpath(path).split(os.sep, 1)[0]
    return first == "runs" or producing_config(path) is not None or producing_script(path) is not None


def missing_folder_message(key: str, path: str) -> str:
    """The one line for a model folder ``path`` (under ``key``) that does not exist: the example that writes it and
    the command, or that it is neither a folder nor a hub name."""
    making = how_to_make(path)
    if making is not None:
        return f"{key}: {path} does not exist: {making}"
    moved = moved_example(path)
    if moved is not None:
        config, folder = moved
        export = os.path.join(folder, os.path.basename(os.path.normpath(path)))
        return (
            f"{key}: {path} does not exist: {shown(config)} now saves to {folder}; pass {key}={export} "
            f"(after `{train_command(config)}`)"
        )
    return f"{key}: {path} does not exist and is not a hub name"


def how_to_make(path: str) -> str | None:
    """``it is the output of configs/X.yaml; run `honing train configs/X.yaml` first`` (or the example script's
    command) when an example writes ``path``, else None."""
    config = producing_config(path)
    if config is not None:
        return f"it is the output of {shown(config)}; run `{train_command(config)}` first"
    script = producing_script(path)
    if script is not None:
        return f"it is written by {script}; run `{python_command()} {script}` first"
    return None


def train_command(config: str) -> str:
    """The command that trains ``config``, as the user types it here."""
    honing = ".venv/bin/honing" if os.path.exists(os.path.join(".venv", "bin", "honing")) else "honing"
    return f"{honing} train {shown(config)}"


def python_command() -> str:
    """The Python the user runs the example scripts with, here."""
    return ".venv/bin/python" if os.path.exists(os.path.join(".venv", "bin", "python")) else "python"


def shown(path: str) -> str:
    """``path`` relative to the working folder when it is below it (``configs/sft-full.yaml``); else an example
    config's name (``sft-full``: the CLI finds packaged configs by name from any folder), else absolute."""
    relative = os.path.relpath(path)
    if not relative.startswith(".."):
        return relative
    if os.path.dirname(os.path.abspath(path)) == os.path.abspath(EXAMPLE_CONFIGS):
        return Path(path).stem
    return path
