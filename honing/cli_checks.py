"""Checks of a command line's paths and numbers at the CLI's edge, before any work starts: each bad value is a
one-line ConfigError naming the argument and what was expected (the CLI prints it and exits 2)."""

from __future__ import annotations

import os

from honing.errors import ConfigError


def is_url(path: str) -> bool:
    """True for a remote location (``s3://...``), which the local checks here cannot look at."""
    return "://" in path


def check_checkpoint(path: str) -> None:
    """Refuse, naming CHECKPOINT, a path that is not a complete honing checkpoint (a ``SAVE_FOLDER/stepN`` folder);
    a run folder is answered with its newest checkpoint."""
    from honing.train.checkpoint import Checkpointer

    if Checkpointer.dir_is_checkpoint(path):
        return
    expected = "give a SAVE_FOLDER/stepN folder that a run finished saving"
    if not is_url(path) and not os.path.exists(path):
        raise ConfigError(f"CHECKPOINT: {path} does not exist; {expected}")
    if not is_url(path) and not os.path.isdir(path):
        raise ConfigError(f"CHECKPOINT: {path} is a file; {expected}")
    if Checkpointer.contains_checkpoint(path):
        raise ConfigError(
            f"CHECKPOINT: {path} is a run folder, not one of its checkpoints; give one, e.g. its newest: "
            f"{Checkpointer.latest_checkpoint(path)}"
        )
    raise ConfigError(f"CHECKPOINT: {path} is not a complete honing checkpoint (no .complete marker); {expected}")


def check_out_dir(path: str, verb: str) -> None:
    """Refuse, naming OUT_DIR, a folder that ``honing export`` / ``merge`` must not replace: they write OUT_DIR
    anew and remove what it held, which is right for an earlier export (it has a ``config.json``) or an empty
    folder, and would lose anything else."""
    if is_url(path) or not os.path.exists(path):
        return
    if not os.path.isdir(path):
        raise ConfigError(f"OUT_DIR: {path} is a file; give a folder for honing {verb} to write")
    if os.listdir(path) and not os.path.isfile(os.path.join(path, "config.json")):
        raise ConfigError(
            f"OUT_DIR: {path} holds other files and is not an earlier export; honing {verb} replaces the folder it "
            "writes, so give a new or empty folder"
        )


def check_at_least(option: str, value: float | None, least: float) -> None:
    """Refuse, naming ``option``, a number below ``least`` (None: not given, nothing to check)."""
    if value is not None and value < least:
        raise ConfigError(f"{option}: expected >= {least}, got {value}")


def check_positive(option: str, value: float | None) -> None:
    """Refuse, naming ``option``, a number that is not above 0 (NaN included; None: not given)."""
    if value is not None and not value > 0:
        raise ConfigError(f"{option}: expected a number > 0, got {value}")


def check_output_folder(option: str, path: str) -> None:
    """Refuse, naming ``option``, a local path that exists as a file where a folder is to be written."""
    if not is_url(path) and os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"{option}: {path} is a file; expected a folder to write (created when missing)")
