"""Export the final model (e.g. to Hugging Face format) when training ends."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from honing.distributed import barrier
from honing.train.callbacks.base import Callback
from honing.train.callbacks.order import PRIORITY

if TYPE_CHECKING:
    from honing.train.callbacks.best_model import BestModelCallback

log = logging.getLogger(__name__)


class ExportCallback(Callback):
    """Calls ``export_fn(SAVE_FOLDER/folder_name)`` at the end of training.

    The trainer does not know the model's format; the recipe passes the function that writes it.
    ``export_fn`` runs on every rank (gathering sharded weights needs all of them) and writes on rank 0.
    """

    priority = PRIORITY["export"]

    def __init__(self, export_fn: Callable[[str], None], *, folder_name: str = "hf"):
        self.export_fn = export_fn
        self.folder_name = folder_name
        # load_best_model_at_end: the best checkpoint's model is exported instead (when there is one)
        self.best: BestModelCallback | None = None

    def on_train_end(self) -> None:
        if self.best is not None and self.best.export_best(self.folder_name) is not None:
            return
        local = os.path.join(self.trainer.work_folder, self.folder_name)
        self.export_fn(local)
        barrier()
        path = self.trainer.persist_working_file(local)  # uploaded when the save folder is remote
        log.info("exported the model to %s", path)
