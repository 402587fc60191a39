"""The run's files beside its checkpoints: the local work folder (OLMo-core's ``work_dir``), files written to the
save folder, and work files persisted there (uploaded in the background when it is remote). The Trainer's
``files``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from honing import storage
from honing.distributed import is_rank0
from honing.train.checkpoint import MARKER, Checkpointer


class RunFiles:
    """Work folder, ``write_file`` and ``persist_working_file`` for the run saved in ``save_folder``; a remote one
    is written through ``checkpointer``'s uploads. ``work_dir``: OLMo-core's ``TrainerConfig.work_dir`` (None: the
    save folder, or a remote one's work folder)."""

    def __init__(self, save_folder: str, checkpointer: Checkpointer, work_dir: str | None = None):
        self.save_folder = save_folder
        self.checkpointer = checkpointer
        self._work_dir = work_dir

    @property
    def work_folder(self) -> str:
        """The local folder for the run's working files: ``work_dir`` when one was given, else the save folder,
        or for a remote one its local work folder."""
        return self._work_dir or self.checkpointer.work_folder(self.save_folder)

    @property
    def work_dir(self) -> Path:
        """OLMo-core's name for ``work_folder``: where working files are written before being persisted to the
        save folder (the save folder itself when it is local and no other was given)."""
        return Path(self.work_folder)

    def write_file(self, name: str, contents: str | bytes, dir: str | os.PathLike | None = None) -> str:
        """Write ``contents`` to ``name`` under ``dir`` (default: the save folder) on rank 0 and return the path;
        a remote folder gets it from a local copy, uploaded in the background (``Checkpointer.write_file``)."""
        folder = self.save_folder if dir is None else os.fspath(dir)
        if not is_rank0():
            return storage.join(folder, name)
        return self.checkpointer.write_file(folder, name, contents)

    def persist_working_file(self, name: str | os.PathLike) -> str:
        """Copy a working file or folder into the save folder (rank 0; to a remote one it is uploaded in the
        background, a folder with a ``.complete`` marker last) and return its path there. ``name`` is relative to
        ``work_dir`` (OLMo-core's form) or a path inside it, keeping its relative name; a path elsewhere keeps its
        base name. An existing file is replaced. Raises FileNotFoundError when a file to copy is missing (a working
        file that already is in the save folder is left as it is)."""
        source, relative = self._working_path(name)
        target = storage.join(self.save_folder, relative)
        if not is_rank0() or (not storage.is_url(target) and os.path.abspath(source) == os.path.abspath(target)):
            return target
        if not os.path.exists(source):
            raise FileNotFoundError(f"{source}: no such working file to persist to {self.save_folder}")
        if storage.is_url(target):
            if os.path.isdir(source):
                self.checkpointer.uploader.upload_folder(source, target, marker=MARKER)
            else:
                self.checkpointer.uploader.upload_file(source, target)
        else:
            os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
            if os.path.isdir(source):
                shutil.copytree(source, target, dirs_exist_ok=True)
            else:
                shutil.copyfile(source, target)
        return target

    def persist_working_subdir(self, name: str | os.PathLike) -> str:
        """Copy a folder of the work folder into the save folder (OLMo-core's name; ``persist_working_file`` for a
        folder) and return its path there. Raises NotADirectoryError when ``name`` is not a folder."""
        source, _ = self._working_path(name)
        if is_rank0() and os.path.exists(source) and not os.path.isdir(source):
            raise NotADirectoryError(f"{source}: persist_working_subdir persists a folder; use persist_working_file")
        return self.persist_working_file(name)

    def _working_path(self, name: str | os.PathLike) -> tuple[str, str]:
        """The local path ``name`` stands for, and its name relative to the work folder."""
        path, work = os.fspath(name), self.work_folder
        inside = os.path.relpath(os.path.abspath(path), os.path.abspath(work))
        if inside not in (os.curdir, os.pardir) and not inside.startswith(os.pardir + os.sep):
            return path, inside
        if os.path.isabs(path):
            return path, os.path.basename(path.rstrip(os.sep))
        return os.path.join(work, path), path
