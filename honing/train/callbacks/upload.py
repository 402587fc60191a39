"""Copy every saved checkpoint, and the final exports, to a second folder: local or any fsspec URL."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from honing import storage
from honing.config.schema import StorageSection
from honing.distributed import is_rank0
from honing.train.callbacks.base import Callback
from honing.train.callbacks.order import PRIORITY
from honing.train.checkpoint import MARKER
from honing.train.remote import Uploader

if TYPE_CHECKING:
    from honing.train.trainer import Trainer

log = logging.getLogger(__name__)


class CheckpointUploadCallback(Callback):
    """Uploads ``SAVE_FOLDER/stepN`` to ``SAVE_PATH/stepN`` after each save and, when training ends, the
    ``hf/`` and ``best/`` exports that exist (olmOCR's checkpoint upload).

    Uploads run in the background on rank 0, in order, retried with backoff while the destination is
    unreachable; each folder gets its ``.complete`` marker last, once every file has arrived with its
    local size. The checkpointer keeps a local checkpoint that is still being copied even when
    ``keep_last`` would remove it, and the end of training waits (bounded) for the copies.
    """

    priority = PRIORITY["upload"]

    def __init__(
        self,
        save_path: str,
        *,
        folders: tuple[str, ...] = ("hf", "best"),
        storage: StorageSection | None = None,
    ):
        self.save_path = save_path
        self.folders = tuple(folders)
        self.uploader = Uploader(storage)  # retried as the storage section says

    def attach(self, trainer: Trainer) -> None:
        super().attach(trainer)
        trainer.checkpointer.add_uploader(self.uploader)

    def on_checkpoint_saved(self, path: str) -> None:
        if is_rank0():
            source = self.trainer.checkpointer.work_folder(path)
            self.uploader.upload_folder(source, self._target(path), marker=MARKER)

    def on_train_end(self) -> None:
        if not is_rank0():
            return
        for name in self.folders:
            source = os.path.join(self.trainer.work_folder, name)
            if os.path.isdir(source):
                self.uploader.upload_folder(source, self._target(name), marker=MARKER)
        log.info("copying checkpoints and exports to %s in the background", self.save_path)

    def _target(self, path: str) -> str:
        return storage.join(self.save_path, os.path.basename(str(path).rstrip("/")))
