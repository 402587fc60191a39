"""Background uploads to another folder (``s3://`` or any fsspec URL, or local): in order, retried with
backoff while the storage is unreachable, a folder marked complete only once all of it has arrived."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
from collections import deque
from dataclasses import dataclass

import fsspec
from fsspec.implementations.local import LocalFileSystem

from honing import storage
from honing.cache import default_cache_dir
from honing.config.schema import StorageSection

log = logging.getLogger(__name__)

# Botocore retries a refused connection for ~10 s before giving up; the uploader retries on its own
# schedule, so one attempt per call keeps the queue responsive and the outage warning prompt.
_UPLOAD_OPTIONS = {"s3": {"config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 10}}}


def work_folder_for(url: str, root: str | None = None) -> str:
    """The local folder where files bound for the remote folder ``url`` are written first:
    ``ROOT/<readable name>-<hash of the URL>`` (ROOT: ``$HONING_CACHE_DIR/work`` or ``~/.cache/honing/work``)."""
    url = str(url).rstrip("/")
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", url.split("://", 1)[-1])[-60:].strip("_")
    digest = hashlib.sha256(url.encode()).hexdigest()[:12]
    return os.path.join(root or os.path.join(default_cache_dir(), "work"), f"{readable}-{digest}")


class UploadError(OSError):
    """Files arrived at the destination with sizes that differ from the local ones."""


@dataclass
class _Task:
    kind: str  # "folder", "file" or "delete"
    source: str | None  # the local path the task reads (None for a delete)
    target: str  # the destination path it writes
    marker: str | None = None  # folders: the file written last, once everything else has arrived


class Uploader:
    """Copies local folders and files to their targets in one background thread, in the order asked.

    A failed task is retried, with exponential backoff, until it succeeds: an outage delays uploads
    but never reorders or drops them, and it is reported once (when it starts and when it ends), not
    at every attempt. A folder's marker file is written last, after every other file is at the
    target with its local size, so a reader that trusts the marker never sees a partial folder.
    Only one process should upload (rank 0); the thread is a daemon and starts at the first task.
    """

    def __init__(self, storage: StorageSection | None = None):
        storage = storage or StorageSection()
        # a retry waits retry_initial_seconds, then twice as long each time, up to retry_max_seconds
        self.retry_initial_seconds = storage.retry_initial_seconds
        self.retry_max_seconds = storage.retry_max_seconds
        self._tasks: deque[_Task] = deque()
        self._confirmed: set[str] = set()  # targets known to be complete at their destination
        self._cond = threading.Condition()
        self._wake = threading.Event()  # set by retry_now: cuts a backoff sleep short
        self._thread: threading.Thread | None = None

    # --- asking -----------------------------------------------------------------------------
    def upload_folder(self, source: str, target: str, *, marker: str) -> None:
        """Copy local folder ``source`` to ``target``, writing ``marker`` last (copied from ``source``
        when it has one, else ``{}``); until then ``target`` has no marker."""
        self._submit(_Task("folder", source, _norm(target), marker))

    def upload_file(self, source: str, target: str) -> None:
        """Copy local file ``source`` to ``target`` (as it is when the upload runs)."""
        task = _Task("file", source, _norm(target))
        with self._cond:
            # A file re-sent often (metrics.jsonl) is uploaded once for all the requests still waiting.
            if any(queued == task for queued in list(self._tasks)[1:]):
                return
        self._submit(task)

    def delete_folder(self, target: str, *, marker: str) -> None:
        """Remove folder ``target`` at its destination, its marker first (after the tasks before it)."""
        self._submit(_Task("delete", None, _norm(target), marker))

    def mark_confirmed(self, target: str) -> None:
        """Record that ``target`` is already complete at its destination (e.g. found by a listing)."""
        with self._cond:
            self._confirmed.add(_norm(target))

    def retry_now(self) -> None:
        """Retry a failing task at once instead of after the rest of its backoff wait."""
        self._wake.set()

    # --- state -----------------------------------------------------------------------------
    def is_confirmed(self, target: str) -> bool:
        """True once ``target`` has been uploaded completely (and not deleted since)."""
        with self._cond:
            return _norm(target) in self._confirmed

    def confirmed(self) -> list[str]:
        """Every target known to be complete at its destination."""
        with self._cond:
            return sorted(self._confirmed)

    @property
    def pending(self) -> list[str]:
        """The targets of the tasks not finished yet, oldest first."""
        with self._cond:
            return [task.target for task in self._tasks]

    @property
    def pending_sources(self) -> list[str]:
        """The local paths the tasks not finished yet read."""
        with self._cond:
            return [task.source for task in self._tasks if task.source]

    def reads_from(self, path: str) -> bool:
        """True while a task not finished yet reads the local ``path`` or a file inside it."""
        path = os.path.abspath(path)
        with self._cond:
            return any(task.source and _inside(os.path.abspath(task.source), path) for task in self._tasks)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every task has finished (or ``timeout`` seconds passed); True when all did."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._tasks, timeout)

    # --- the worker --------------------------------------------------------------------------
    def _submit(self, task: _Task) -> None:
        with self._cond:
            # A folder being replaced or deleted is no longer complete from now on.
            self._confirmed.discard(task.target)
            self._tasks.append(task)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="honing-upload", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def _run(self) -> None:
        failures = 0
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._tasks))
                task = self._tasks[0]
            done = False
            try:
                self._execute(task)
                done = True
            except Exception as error:
                if task.source and not os.path.exists(task.source):
                    # Nothing left to send (removed by its owner): retrying could never succeed.
                    log.warning("not uploading %s: its local copy %s no longer exists", task.target, task.source)
                else:
                    failures += 1
                    self._report_failure(task, error, failures)
                    self._wake.wait(min(self.retry_max_seconds, self.retry_initial_seconds * 2 ** (failures - 1)))
                    self._wake.clear()
                    continue
            else:
                if failures:
                    log.warning(
                        "uploads to %s work again after %d failed attempt(s); %d task(s) left",
                        _destination(task.target),
                        failures,
                        len(self._tasks) - 1,
                    )
                failures = 0
            with self._cond:
                self._tasks.popleft()
                # a later task for the same target (a delete, a newer copy) decides its state instead
                if done and task.kind != "delete" and all(t.target != task.target for t in self._tasks):
                    self._confirmed.add(task.target)
                self._cond.notify_all()

    def _report_failure(self, task: _Task, error: Exception, failures: int) -> None:
        if failures == 1:  # once per outage: the recovery message closes it
            log.warning(
                "cannot upload to %s: %s; training goes on, local copies are kept and %d upload(s) "
                "are retried every %g-%g s until the storage answers",
                _destination(task.target),
                storage.redact_secrets(_describe(error)),
                len(self._tasks),
                self.retry_initial_seconds,
                self.retry_max_seconds,
            )
        else:
            log.debug(
                "upload to %s failed again (attempt %d): %s",
                task.target,
                failures + 1,
                storage.redact_secrets(_describe(error)),
            )

    def _execute(self, task: _Task) -> None:
        fs, root = _filesystem(task.target)
        if task.kind == "file":
            self._put_file(fs, task.source, root)
            size, arrived = os.path.getsize(task.source), fs.size(root)
            if arrived != size:
                raise UploadError(f"{task.target}: arrived with {arrived} bytes, expected {size}")
        elif task.kind == "delete":
            if fs.exists(f"{root}/{task.marker}"):
                fs.rm_file(f"{root}/{task.marker}")
            if fs.exists(root):
                fs.rm(root, recursive=True)
        else:
            self._upload_folder(fs, root, task)

    def _upload_folder(self, fs: fsspec.AbstractFileSystem, root: str, task: _Task) -> None:
        local = storage.file_sizes(task.source)
        if not local:
            raise FileNotFoundError(f"{task.source}: no such folder, or it is empty")
        marker = local.pop(task.marker, None)
        remote = _sizes(task.target)
        if task.marker in remote:  # replacing an older copy: hide it before changing it
            fs.rm_file(f"{root}/{task.marker}")
        for name in set(remote) - set(local) - {task.marker}:
            fs.rm_file(f"{root}/{name}")
        for name, size in sorted(local.items()):
            if remote.get(name) != size:  # an earlier, interrupted attempt may have sent some already
                self._put_file(fs, os.path.join(task.source, name), f"{root}/{name}")
        arrived = _sizes(task.target)
        wrong = sorted(name for name, size in local.items() if arrived.get(name) != size)
        if wrong:
            raise UploadError(
                f"{task.target}: {len(wrong)} file(s) did not arrive whole, e.g. {wrong[0]} "
                f"({arrived.get(wrong[0])} bytes, expected {local[wrong[0]]})"
            )
        contents = b"{}"
        if marker is not None:
            with open(os.path.join(task.source, task.marker), "rb") as handle:
                contents = handle.read()
        self._put_bytes(fs, f"{root}/{task.marker}", contents)

    def _put_file(self, fs: fsspec.AbstractFileSystem, source: str, target: str) -> None:
        if _is_local(fs):
            os.makedirs(os.path.dirname(target), exist_ok=True)
        fs.put_file(source, target)
        if _is_local(fs):
            _fsync(target)

    def _put_bytes(self, fs: fsspec.AbstractFileSystem, target: str, data: bytes) -> None:
        if _is_local(fs):
            storage.write_bytes(target, data)  # fsynced: the marker must not outlive the data in a crash
        else:
            fs.pipe_file(target, data)


def _filesystem(target: str) -> tuple[fsspec.AbstractFileSystem, str]:
    fs, root = storage.filesystem(target, **_upload_options(target))
    return fs, root.rstrip("/")


def _sizes(target: str) -> dict[str, int]:
    return storage.file_sizes(target, **_upload_options(target))


def _upload_options(target: str) -> dict:
    return _UPLOAD_OPTIONS.get(fsspec.core.split_protocol(target)[0] or "", {})


def _is_local(fs: fsspec.AbstractFileSystem) -> bool:
    return isinstance(fs, LocalFileSystem)


def _fsync(path: str) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def _norm(path: str) -> str:
    return str(path).rstrip("/")


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep) or folder.startswith(path + os.sep)


def _destination(target: str) -> str:
    """The storage a target lives on, for messages: ``s3://bucket`` or the local folder."""
    if storage.is_url(target):
        protocol, rest = target.split("://", 1)
        return f"{protocol}://{rest.split('/', 1)[0]}"
    return os.path.dirname(target)


def _describe(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    first = lines[0][:300] if lines else ""
    return f"{type(error).__name__}: {first}" if first else type(error).__name__
