"""The local paths a training run writes and reads, checked as it starts, before any tokenizer or model is built:
``trainer.save_folder`` (a folder that can be written), ``trainer.load_path`` (a checkpoint, or a folder of them)
and every data source's path. Each bad one is a one-line error naming the key and the fix; remote URLs
(``s3://...``) are left to the storage layer, hub data set names to the row reader."""

from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING

from honing.data.generated.tasks import PREFIX as GENERATED_PREFIX
from honing.data.row_reader import reads_with_datasets
from honing.data.sources import expand_paths
from honing.errors import ConfigError, DataError
from honing.train.checkpoint import Checkpointer

if TYPE_CHECKING:
    from honing.config import RunConfig
    from honing.config.data_schema import DataSection
    from honing.config.trainer_schema import TrainerSection

SAVE_FOLDER_FIX = "give a folder this user can write (it is created when missing)"


def check_run_paths(config: RunConfig) -> None:
    """Refuse, in one line naming the key, a save folder, load path or data path the run cannot use."""
    check_save_folder(config.trainer.save_folder)
    check_load_path(config.trainer)
    check_data_paths(config.data)


def is_local(path: str) -> bool:
    """True for a path on this machine's file system (not ``s3://...`` or another fsspec URL)."""
    return "://" not in path


def check_save_folder(path: str) -> None:
    """Refuse a save folder that is a file, lies below a file, or cannot be written; writes nothing that stays."""
    if not is_local(path):
        return
    existing = os.path.abspath(path)
    while not os.path.exists(existing):  # the folder the run would create its save folder in
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        what = "is a file" if existing == os.path.abspath(path) else f"lies below the file {existing}"
        raise ConfigError(f"trainer.save_folder: {path} {what}; {SAVE_FOLDER_FIX}")
    try:  # a real write: permission bits say nothing for root, a read-only mount or an ACL
        os.rmdir(tempfile.mkdtemp(prefix=".honing-write-check-", dir=existing))
    except OSError as error:
        raise ConfigError(
            f"trainer.save_folder: cannot write {path} ({error.strerror or error} in {existing}); {SAVE_FOLDER_FIX}"
        ) from None


def check_load_path(trainer: TrainerSection) -> None:
    """Refuse a ``load_path`` that the run would read and that is no checkpoint: missing, a file, or a folder with
    no complete ``stepN``. Not read (so not checked) when the save folder holds a checkpoint to resume from."""
    path = trainer.load_path
    if path is None or trainer.load_strategy == "never" or not is_local(path):
        return
    save_folder = trainer.save_folder
    if is_local(save_folder) and os.path.isdir(save_folder) and Checkpointer.contains_checkpoint(save_folder):
        return  # the run resumes from its own checkpoint; load_path is not used
    fix = "give a checkpoint (SAVE_FOLDER/stepN) or a run folder holding them, or remove trainer.load_path"
    if not os.path.exists(path):
        raise ConfigError(f"trainer.load_path: {path} does not exist; {fix}")
    if not os.path.isdir(path):
        raise ConfigError(f"trainer.load_path: {path} is a file; {fix}")
    if not Checkpointer.dir_is_checkpoint(path) and not Checkpointer.contains_checkpoint(path):
        raise ConfigError(f"trainer.load_path: {path} holds no complete checkpoint (stepN with .complete); {fix}")


def check_data_paths(data: DataSection) -> None:
    """Refuse a data source whose local path names no file (the row readers would fail there, after the model)."""
    for split in ("train", "validation"):
        section = getattr(data, split, None)
        for index, source in enumerate(section.sources if section is not None else []):
            path = source.path
            if not is_local(path) or path.startswith(GENERATED_PREFIX) or reads_with_datasets(path):
                continue  # remote files, generated tasks and hub data sets: their readers check them
            try:
                expand_paths(path)
            except DataError as error:
                where = "" if os.path.isabs(path) else f" (relative to {os.getcwd()})"
                raise DataError(f"data.{split}.sources[{index}].path: {error}{where}") from None
