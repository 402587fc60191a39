"""A checkpointer's remote save folders: checkpoints written to a local work folder first and uploaded in the
background, which of them are confirmed remotely, and waiting for the uploads. A part of ``Checkpointer``."""

from __future__ import annotations

import logging
import os
import time

from honing import storage
from honing.train.checkpoint_io import STEP_DIR, describe_error, remove_checkpoint
from honing.train.remote import Uploader, work_folder_for

log = logging.getLogger("honing.train.checkpoint")


class CheckpointerRemote:
    """Work folders and uploads (the Checkpointer sets ``uploader``, ``work_root`` and the lists below)."""

    uploader: Uploader | None
    work_root: str | None
    upload_wait_seconds: float
    _other_uploaders: list[Uploader]
    _deferred_deletes: list[str]
    _listed: set[str]

    def uploads_in_background(self, path: str) -> bool:
        """True when checkpoints under ``path`` are written locally first and uploaded in the background."""
        return self.uploader is not None and storage.is_url(path)

    def work_folder(self, path: str) -> str:
        """Where files bound for the folder ``path`` are written: ``path`` itself, unless it is remote and
        uploaded in the background. Then a checkpoint ``.../stepN`` is written to ``stepN`` in its save
        folder's work folder, and any other folder to a work folder of its own under ``work_root``."""
        if not self.uploads_in_background(path):
            return path
        parent, name = str(path).rstrip("/").rsplit("/", 1)
        if STEP_DIR.match(name) and "://" in parent:
            return os.path.join(self.work_folder(parent), name)
        return work_folder_for(path, self.work_root)

    def add_uploader(self, uploader: Uploader) -> None:
        """Register another uploader reading local checkpoints: no local copy it still reads is deleted,
        and ``wait_for_uploads`` waits for it too."""
        self._other_uploaders.append(uploader)

    def confirmed_checkpoints(self, folder: str) -> list[tuple[int, str]]:
        """The complete checkpoints in ``folder`` as ``(step, path)``, oldest first; for a folder uploaded
        in the background, those whose upload is confirmed (the storage is listed once, then not asked)."""
        if not self.uploads_in_background(folder):
            return self.find_checkpoints(folder)
        self._list_once(folder)
        prefix = str(folder).rstrip("/") + "/"
        found = []
        for path in self.uploader.confirmed():
            match = STEP_DIR.match(path[len(prefix) :]) if path.startswith(prefix) else None
            if match:
                found.append((int(match.group(1)), path))
        return sorted(found)

    def wait_for_uploads(self, timeout: float | None = None) -> bool:
        """Wait (at most ``timeout``, default ``upload_wait_seconds``) for every pending upload; True when
        all arrived. What has not arrived stays in the local work folders, as the warning says."""
        uploaders = [u for u in (self.uploader, *self._other_uploaders) if u is not None]
        pending = [target for uploader in uploaders for target in uploader.pending]
        done = True
        if pending:
            timeout = self.upload_wait_seconds if timeout is None else timeout
            log.info("waiting up to %g s for %d upload(s) to finish: %s", timeout, len(pending), ", ".join(pending))
            for uploader in uploaders:
                uploader.retry_now()  # not the rest of a long backoff: the storage may be back already
            deadline = time.monotonic() + timeout
            done = all([uploader.wait(max(0.0, deadline - time.monotonic())) for uploader in uploaders])
            if not done:
                left = [target for uploader in uploaders for target in uploader.pending]
                sources = sorted({source for uploader in uploaders for source in uploader.pending_sources})
                log.warning(
                    "%d upload(s) did not finish within %g s and are abandoned: %s; the local copies are kept: %s",
                    len(left),
                    timeout,
                    ", ".join(left),
                    ", ".join(sources),
                )
        self._delete_deferred()
        return done

    def _list_once(self, folder: str) -> None:
        # Checkpoints already in the folder (an earlier run's) count as confirmed: keep_last may prune them,
        # and saving over one needs save_overwrite, as for a local folder.
        if folder in self._listed:
            return
        self._listed.add(folder)
        try:
            for _, path in self.find_checkpoints(folder):
                self.uploader.mark_confirmed(path)
        except Exception as error:
            log.warning(
                "cannot list %s (%s): checkpoints already there are neither pruned nor protected from "
                "being overwritten",
                folder,
                storage.redact_secrets(describe_error(error)),
            )

    def _delete_deferred(self) -> None:
        for path in list(self._deferred_deletes):
            if not self._read_by_uploads(path):
                self._deferred_deletes.remove(path)
                remove_checkpoint(path)

    def _read_by_uploads(self, path: str) -> bool:
        return any(u.reads_from(path) for u in (self.uploader, *self._other_uploaders) if u is not None)
