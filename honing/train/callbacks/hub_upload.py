"""Push the run's final export, and by strategy its checkpoints, to a Hugging Face Hub model repository
(transformers' ``push_to_hub`` / ``hub_strategy``), with ``huggingface_hub``'s ``upload_folder`` from rank 0."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from honing.distributed import is_rank0
from honing.errors import ConfigError
from honing.train.callbacks.base import Callback
from honing.train.callbacks.order import PRIORITY

if TYPE_CHECKING:
    from huggingface_hub import HfApi

log = logging.getLogger(__name__)

LAST_CHECKPOINT = "last-checkpoint"  # transformers' folder for hub_strategy: checkpoint


class HubUploader:
    """One background thread that runs ``upload_folder`` calls in order; the checkpointer asks it which local
    folders it still reads (they are not pruned until pushed) and waits for it at the end, as for the bucket
    uploader (``honing.train.remote.Uploader``)."""

    def __init__(self, api: HfApi, repo_id: str, revision: str | None):
        self.api, self.repo_id, self.revision = api, repo_id, revision
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="honing-hub")
        self._lock = threading.Lock()
        self._jobs: list[tuple[str, str, Future]] = []  # (local folder, path in the repository, its push)

    def push(self, source: str, path_in_repo: str, message: str, *, replace: bool = False) -> None:
        """Queue ``source`` for ``path_in_repo`` (``replace``: the files there it lacks are deleted)."""
        future = self._executor.submit(self._push, source, path_in_repo, message, replace)
        with self._lock:
            self._jobs.append((source, path_in_repo, future))

    def _push(self, source: str, path_in_repo: str, message: str, replace: bool) -> str:
        commit = self.api.upload_folder(
            folder_path=source,
            repo_id=self.repo_id,
            repo_type="model",
            path_in_repo=path_in_repo or None,
            revision=self.revision,
            commit_message=message,
            delete_patterns=["*"] if replace else None,
        )
        return str(getattr(commit, "commit_url", commit))

    def _open(self) -> list[tuple[str, str, Future]]:
        with self._lock:
            return [job for job in self._jobs if not job[2].done()]

    @property
    def pending(self) -> list[str]:
        """The repository paths still being pushed."""
        return [f"{self.repo_id}/{path}" for _, path, _ in self._open()]

    @property
    def pending_sources(self) -> list[str]:
        """The local folders still being pushed."""
        return [source for source, _, _ in self._open()]

    def reads_from(self, path: str) -> bool:
        """True while a push still reads the local folder ``path``."""
        path = os.path.normpath(path)
        return any(os.path.normpath(source) == path for source in self.pending_sources)

    def retry_now(self) -> None:
        """Nothing to cut short: huggingface_hub retries its own requests."""

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for every queued push (at most ``timeout`` seconds); True when none is left."""
        futures = [future for _, _, future in self._open()]
        for future in futures:
            try:
                future.result(timeout=timeout)
            except TimeoutError:
                return False
            except Exception:  # noqa: BLE001 - reported by failures(), once
                pass
        return not self._open()

    def failures(self) -> list[tuple[str, BaseException]]:
        """The pushes that raised: (path in the repository, the error); each reported once."""
        with self._lock:
            failed = [(path or "/", future.exception()) for _, path, future in self._jobs if future.done()
                      and future.exception() is not None]  # fmt: skip
            self._jobs = [job for job in self._jobs if not job[2].done()]
        return failed


class HubUploadCallback(Callback):
    """Creates the repository when training begins (a bad token or name fails before any step), pushes each saved
    checkpoint by ``strategy`` (``checkpoint``: to ``last-checkpoint/``, replaced each time; ``all_checkpoints``:
    to ``stepN/``) and, when training ends, the ``folder`` export to the repository's root; then waits for the
    pushes. A push that fails is a warning naming ``honing push`` to retry: the run's files are all local."""

    priority = PRIORITY["hub"]

    def __init__(
        self,
        repo_id: str,
        *,
        strategy: str = "end",
        folder: str = "hf",
        private: bool = False,
        revision: str | None = None,
        api_factory: Callable[[], Any] | None = None,
    ):
        if strategy not in ("end", "checkpoint", "all_checkpoints"):
            raise ValueError(f"strategy must be end, checkpoint or all_checkpoints, got {strategy!r}")
        self.repo_id, self.strategy, self.folder = repo_id, strategy, folder
        self.private, self.revision = private, revision
        self.api_factory = api_factory or default_api
        self.uploader: HubUploader | None = None

    def on_train_begin(self) -> None:
        if not is_rank0():
            return
        api = self.api_factory()  # the token: HF_TOKEN or the saved login, read by huggingface_hub itself
        try:
            url = api.create_repo(self.repo_id, private=self.private, exist_ok=True, repo_type="model")
        except Exception as error:
            raise ConfigError(
                f"callbacks.hub.repo_id: cannot create or reach {self.repo_id!r} on the Hugging Face Hub "
                f"({type(error).__name__}); check the name and the token (HF_TOKEN or `hf auth login`)"
            ) from None
        repo_id = getattr(url, "repo_id", None) or self.repo_id  # a bare name resolves under the token's account
        self.uploader = HubUploader(api, repo_id, self.revision)
        if self.strategy != "end":
            self.trainer.checkpointer.add_uploader(self.uploader)
        log.info("pushing to the Hugging Face Hub repository %s (%s)", repo_id, self.strategy)

    def on_checkpoint_saved(self, path: str) -> None:
        if self.uploader is None or self.strategy == "end":
            return
        source = self.trainer.checkpointer.work_folder(path)
        name = os.path.basename(str(path).rstrip("/"))
        if self.strategy == "checkpoint":
            self.uploader.push(source, LAST_CHECKPOINT, f"Checkpoint {name} with honing", replace=True)
        else:
            self.uploader.push(source, name, f"Checkpoint {name} with honing")

    def on_train_end(self) -> None:
        if self.uploader is None:
            return
        source = os.path.join(self.trainer.work_folder, self.folder)
        if os.path.isdir(source):
            self.uploader.push(source, "", f"Upload {self.folder}/ with honing")
        else:
            log.warning("callbacks.hub: %s was not written, nothing to push to the repository's root", source)
        self.uploader.wait()
        for path, error in self.uploader.failures():
            log.warning(
                "callbacks.hub: pushing %s to %s failed (%s: %s); the files are local, push them with "
                "`honing push %s %s`",
                path, self.uploader.repo_id, type(error).__name__, error, self.trainer.work_folder,
                self.uploader.repo_id,
            )  # fmt: skip


def default_api() -> HfApi:
    """``huggingface_hub.HfApi()``: its token is ``HF_TOKEN``'s or the saved login's."""
    from huggingface_hub import HfApi

    return HfApi()
