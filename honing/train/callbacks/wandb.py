"""Log every metric to Weights & Biases (``SAVE_FOLDER/wandb/``), resuming the same W&B run."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from honing.train.callbacks.tracker import TrackerCallback

API_KEY_ENV = "WANDB_API_KEY"


class WandbCallback(TrackerCallback):
    """A W&B run per training run; a resumed run continues it (its id is in this callback's state).

    ``mode`` is ``online``, ``offline`` or ``disabled`` (None: ``WANDB_MODE``, else online). The
    API key (given, else ``WANDB_API_KEY``) reaches wandb only through the environment while the
    run starts: it is never part of the config sent to W&B, a log line or a saved file.
    """

    backend = "wandb"

    def __init__(
        self,
        *,
        project: str | None = None,
        entity: str | None = None,
        name: str | None = None,
        tags: list[str] | None = None,
        group: str | None = None,
        mode: str | None = None,
        api_key: str | None = None,
        config: Mapping[str, Any] | None = None,
    ):
        super().__init__(config=config)
        self.project = project
        self.entity = entity
        self.name = name
        self.tags = list(tags or [])
        self.group = group
        self.mode = mode
        self.run_id: str | None = None
        self.run: Any = None
        # W&B drops rows logged at a step below its current one, and samples of step N arrive before
        # N's metrics are collected: they wait for step N's metrics (or the finish).
        self._pending_tables: list[tuple[int, str, Any]] = []
        self._api_key = api_key
        self._secrets = tuple(s for s in (api_key, os.environ.get(API_KEY_ENV)) if s)

    def start(self) -> None:
        import wandb

        self.run_id = self.run_id or uuid.uuid4().hex[:16]
        # wandb adds the wandb/ folder itself: the run lands in SAVE_FOLDER/wandb/
        os.makedirs(self.trainer.work_folder, exist_ok=True)  # wandb syncs its own files; keep them local
        with _environment(API_KEY_ENV, self._api_key):
            # create_new: a run the user opened in this process is neither finished nor reused
            self.run = wandb.init(
                project=self.project,
                entity=self.entity,
                name=self.name,
                tags=self.tags or None,
                group=self.group,
                # read now: wandb reads WANDB_MODE once per process, when its settings are first made
                mode=self.mode or os.environ.get("WANDB_MODE") or None,
                dir=self.trainer.work_folder,
                id=self.run_id,
                resume="allow",
                config=self.config,
                reinit="create_new",
            )

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        due = {key: table for table_step, key, table in self._pending_tables if table_step <= step}
        self._pending_tables = [entry for entry in self._pending_tables if entry[0] > step]
        self.run.log({**metrics, **due}, step=step)

    def log_samples(self, step: int, name: str, rows: list[dict[str, Any]]) -> None:
        import wandb

        columns = ["step", *rows[0]] if rows else ["step"]
        table = wandb.Table(columns=columns, data=[[step, *row.values()] for row in rows])
        self._pending_tables.append((step, f"samples/{name}", table))

    def finish(self, *, failed: bool) -> None:
        if self.run is not None:
            run, self.run = self.run, None
            for _, key, table in self._pending_tables:  # at the step W&B is on: the last one logged
                run.log({key: table})
            self._pending_tables = []
            run.finish(exit_code=1 if failed else 0)

    def state_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id} if self.run_id else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.run_id = state_dict.get("run_id") or self.run_id


@contextlib.contextmanager
def _environment(name: str, value: str | None) -> Iterator[None]:
    """Set an environment variable for the block only (nothing when ``value`` is None)."""
    if value is None:
        yield
        return
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous
