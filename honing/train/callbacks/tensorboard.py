"""Log every metric as a TensorBoard scalar in ``SAVE_FOLDER/tensorboard/``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import yaml

from honing.train.callbacks.tracker import TrackerCallback

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter


class TensorBoardCallback(TrackerCallback):
    """Scalars for every logged metric, the (redacted) config once as text, flushed at train end.

    A resumed run purges events from the step after its checkpoint on, so steps the stopped run
    logged past its last checkpoint are not drawn twice.
    """

    backend = "tensorboard"

    def __init__(self, *, config: Mapping[str, Any] | None = None, folder_name: str = "tensorboard"):
        super().__init__(config=config)
        self.folder_name = folder_name
        self.writer: SummaryWriter | None = None

    @property
    def log_dir(self) -> str:
        """Where the event files are written."""
        return os.path.join(self.trainer.work_folder, self.folder_name)

    def start(self) -> None:
        from torch.utils.tensorboard import SummaryWriter

        resumed_at = self.trainer.global_step
        self.writer = SummaryWriter(log_dir=self.log_dir, purge_step=resumed_at + 1 if resumed_at else None)
        if self.config is not None:
            # indented four spaces: a Markdown code block, so TensorBoard keeps the YAML's layout
            text = "".join(f"    {line}\n" for line in yaml.safe_dump(self.config, sort_keys=False).splitlines())
            self.writer.add_text("config", text, global_step=resumed_at)

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        for name, value in metrics.items():
            self.writer.add_scalar(name, value, global_step=step)

    def log_samples(self, step: int, name: str, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        # a Markdown table: TensorBoard's text tab renders it
        columns = list(rows[0])
        lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
        lines += ["| " + " | ".join(_cell(row[c]) for c in columns) + " |" for row in rows]
        self.writer.add_text(f"samples/{name}", "\n".join(lines), global_step=step)

    def finish(self, *, failed: bool) -> None:
        if self.writer is not None:
            writer, self.writer = self.writer, None
            writer.close()  # flushes first
            self.trainer.persist_working_file(self.log_dir)  # uploaded when the save folder is remote


def _cell(value: object) -> str:
    """A value as one Markdown table cell: pipes escaped, line breaks shown as <br>."""
    return str(value).replace("|", "\\|").replace("\n", "<br>")
