"""Save and load ``SAVE_FOLDER/stepN`` checkpoints: sharded model and optimizer state (DCP), per-rank
trainer state and extra files, made visible all at once by a ``.complete`` marker and a rename.

A remote save folder (``s3://...``) with an uploader is written to its local work folder first and uploaded
in the background (see ``honing.train.remote``): training never waits on the network. The work folder
must be on storage all ranks share (one node); rank 0 uploads once every rank's files are written.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from honing import storage
from honing.config.schema import StorageSection
from honing.distributed import get_rank, get_world_size, is_distributed, ranks_where
from honing.errors import CheckpointError, CheckpointMismatchError, ConfigError
from honing.train.checkpoint_download import downloaded
from honing.train.checkpoint_io import (
    MARKER,
    MODEL_AND_OPTIM_DIR,
    STEP_DIR,
    TRAIN_DIR,
    copy_to_cpu,
    describe_error,
    has_optimizer_state,
    is_ephemeral,
    quiet_metadata_fallback,
    read_trainer_state,
    remove_checkpoint,
    serialize_trainer_state,
    storage_reader,
    storage_writer,
)
from honing.train.checkpoint_remote import CheckpointerRemote
from honing.train.remote import Uploader
from honing.train.train_module import ModelState

#: DCP's words for a key this run's state asks for that the checkpoint's index does not have
MISSING_KEY = "Missing key in checkpoint state_dict"

log = logging.getLogger(__name__)

TEMP_SUFFIX = ".tmp"
CORRUPT_SUFFIX = ".corrupt"  # an unloadable checkpoint moved aside: never loaded, never in the way of a save
RESERVED_NAMES = (MODEL_AND_OPTIM_DIR, TRAIN_DIR, MARKER)
_TEMP_STEP_DIR = re.compile(r"^step(\d+)" + re.escape(TEMP_SUFFIX) + "$")


class _Unset:
    """The type of ``UNSET``: a keyword left out, told apart from an explicit None."""


UNSET = _Unset()


# A single process saving and loading without a process group is the intended mode, not a mistake.
warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")


class Checkpointer(CheckpointerRemote):
    """Writes and reads checkpoint directories; at most one asynchronous save is in flight at a time."""

    def __init__(
        self,
        *,
        process_group: dist.ProcessGroup | None = None,
        save_overwrite: bool = False,
        uploader: Uploader | None = None,
        storage: StorageSection | None = None,
        work_dir: str | None = None,
        pre_download: bool = False,
        save_thread_count: int | None = None,
        load_thread_count: int | None = None,
        throttle_uploads: bool = False,
    ):
        for name, count in (("save_thread_count", save_thread_count), ("load_thread_count", load_thread_count)):
            if count is not None and count < 1:
                raise ConfigError(f"Checkpointer {name}: expected at least 1 thread, got {count}")
        self.process_group = process_group
        self.save_overwrite = save_overwrite
        # With an uploader, remote checkpoints are written to work folders under the storage section's
        # work_folder (default: the cache) and uploaded by it; without one they are written to the URL
        # directly, on the saving thread. The end of training waits upload_wait_seconds for the uploads.
        storage = storage or StorageSection()
        self.uploader = uploader
        self.work_root = work_dir or storage.work_folder
        self.upload_wait_seconds = storage.upload_wait_seconds
        # OLMo-core's knobs: threads DCP writes each rank's files with; a remote checkpoint fetched to a local
        # copy (with load_thread_count threads) before it is read
        self.save_thread_count = save_thread_count or 1
        self.pre_download = pre_download
        self.load_thread_count = load_thread_count
        # honing's uploads are always throttled (rank 0's one uploader thread, a file at a time): either value
        # of OLMo-core's throttle_uploads gets that
        self.throttle_uploads = throttle_uploads
        self._executor: ThreadPoolExecutor | None = None
        self._pending: Future | None = None
        self._background_group: dist.ProcessGroup | None = None
        self._other_uploaders: list[Uploader] = []
        self._deferred_deletes: list[str] = []  # local copies to remove once no upload reads them
        self._listed: set[str] = set()  # remote folders whose complete checkpoints the uploader knows

    # --- saving -------------------------------------------------------------------------
    def save(
        self,
        dir: str,
        train_module: ModelState,
        train_state: dict[str, Any],
        ephemeral: bool = False,
        *,
        extra_files: dict[str, str | bytes] | None = None,
    ) -> None:
        """Write a checkpoint of ``train_module`` and ``train_state`` to ``dir`` and return when it is complete.
        ``ephemeral`` is recorded in the marker's metadata (as OLMo-core does); removing it is the
        CheckpointerCallback's job."""
        extra_files, trainer_bytes = self._begin_save(dir, train_state, extra_files)
        self._write(dir, train_module.state_dict_to_save(), trainer_bytes, extra_files, self.process_group, ephemeral)

    def save_async(
        self,
        dir: str,
        train_module: ModelState,
        train_state: dict[str, Any],
        ephemeral: bool = False,
        *,
        extra_files: dict[str, str | bytes] | None = None,
    ) -> Future:
        """Copy the state to CPU memory, then write it in a background thread; the future completes
        when ``dir`` is a complete checkpoint."""
        extra_files, trainer_bytes = self._begin_save(dir, train_state, extra_files)
        staged = copy_to_cpu(train_module.state_dict_to_save())
        group = self._group_for_background()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="honing-checkpoint")
        self._pending = self._executor.submit(self._write, dir, staged, trainer_bytes, extra_files, group, ephemeral)
        return self._pending

    def wait(self) -> None:
        """Block until the pending asynchronous save (if any) has finished, re-raising its error."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def _begin_save(
        self, dir: str, train_state: dict[str, Any], extra_files: dict[str, str | bytes] | None
    ) -> tuple[dict[str, str | bytes], bytes]:
        # The pending save finishes first: the check below must see the checkpoint it was writing.
        self.wait()
        extra_files = self._check_save(dir, extra_files)
        return extra_files, serialize_trainer_state(train_state, dir)

    def _check_save(self, dir: str, extra_files: dict[str, str | bytes] | None) -> dict[str, str | bytes]:
        # Checked on the caller's thread on every rank (the folder is shared), so all ranks agree and
        # the error reaches the training loop instead of a background future.
        if self.uploads_in_background(dir):
            self._list_once(str(dir).rstrip("/").rsplit("/", 1)[0])
            exists = self.uploader.is_confirmed(dir)  # the local copy is only a cache: never an obstacle
        else:
            exists = self.dir_is_checkpoint(dir)
        if exists and not self.save_overwrite:
            raise CheckpointError(f"{dir}: a checkpoint already exists there; set save_overwrite to replace it")
        extra_files = dict(extra_files or {})
        for name in extra_files:
            parts = name.replace("\\", "/").split("/")
            if name.startswith("/") or ".." in parts or parts[0] in RESERVED_NAMES:
                raise CheckpointError(
                    f"{dir}: extra file name {name!r} must be a relative path inside the "
                    f"checkpoint, not starting with one of {', '.join(RESERVED_NAMES)}"
                )
        return extra_files

    def _group_for_background(self) -> dist.ProcessGroup | None:
        if not is_distributed() or self.process_group is not None:
            return self.process_group
        if self._background_group is None:
            # The writer thread must not issue collectives on the default group while training uses it
            # (NCCL would interleave them); a gloo group of its own is safe. Created on the main thread,
            # where every rank reaches it in the same order.
            self._background_group = dist.new_group(backend="gloo")
        return self._background_group

    def _write(
        self,
        dir: str,
        state: dict[str, Any],
        trainer_bytes: bytes,
        extra_files: dict[str, str | bytes],
        group: dist.ProcessGroup | None,
        ephemeral: bool = False,
    ) -> None:
        rank, distributed = get_rank(), is_distributed()
        local = self.work_folder(dir)  # where the files go first (dir itself unless uploaded afterwards)
        temp = _temp_dir(local)
        try:
            if rank == 0:
                storage.rm(temp)  # left by a save that crashed
                storage.makedirs(storage.join(temp, TRAIN_DIR))
            _barrier(group)
            storage.write_bytes(storage.join(temp, TRAIN_DIR, f"rank{rank}.pt"), trainer_bytes)
            if rank == 0:
                for name, contents in extra_files.items():
                    storage.write_bytes(
                        storage.join(temp, name), contents.encode() if isinstance(contents, str) else contents
                    )
            model_dir = storage.join(temp, MODEL_AND_OPTIM_DIR)
            dcp.save(
                state,
                checkpoint_id=model_dir,
                storage_writer=storage_writer(model_dir, self.save_thread_count),
                process_group=group,
                no_dist=not distributed,
            )
            _barrier(group)
            if rank == 0:
                marker = json.dumps({"world_size": get_world_size(), "ephemeral": ephemeral}).encode()
                # A local rename is atomic, so the marker goes in first; on an object store a move is a
                # copy that could expose a marker before the data, so there it is written after.
                atomic_rename = not storage.is_url(local)
                if atomic_rename:
                    storage.write_bytes(storage.join(temp, MARKER), marker)
                if storage.exists(local):  # an older checkpoint being overwritten, or a crashed save's leftovers
                    remove_checkpoint(local)
                storage.rename(temp, local)
                if not atomic_rename:
                    storage.write_bytes(storage.join(local, MARKER), marker)
            _barrier(group)  # no rank returns before the checkpoint is visible
        except (OSError, CheckpointException) as error:  # DCP reports a rank's failed write as the latter
            if not distributed:  # free what the failed save wrote (a full disk); with peers, the next start does
                with contextlib.suppress(OSError):
                    storage.rm(temp)
            raise CheckpointError(
                f"{local}: could not save checkpoint: {describe_error(error)}; it was not marked complete and the "
                f"earlier checkpoints are kept"
            ) from error
        if rank == 0 and local != dir:  # every rank's files are written (the barrier above)
            self.uploader.upload_folder(local, dir, marker=MARKER)
        log.debug("saved checkpoint %s", local)

    # --- loading ------------------------------------------------------------------------
    def load(
        self,
        dir: str,
        train_module: ModelState,
        *,
        load_optimizer_state: bool | None = True,
        load_trainer_state: bool | None = True,
        this_process_only: bool = False,
        load_optim_state: bool | None | _Unset = UNSET,
    ) -> dict[str, Any] | None:
        """Load model (and optimizer) state from ``dir`` into ``train_module`` in place; return this rank's
        trainer state, or None when ``load_trainer_state`` is False. Without ``load_optimizer_state`` (OLMo-core's
        ``load_optim_state``) only the weights are read: the optimizer and the module's extra state (e.g. its LR
        scheduler) stay as they are. None for either (OLMo-core's default) loads that state when the checkpoint has
        it. ``this_process_only`` reads without collectives, for one rank loading a whole model on its own (e.g.
        rank 0 exporting the best model). A remote ``dir`` is first copied to a local folder when ``pre_download``
        or ``load_thread_count`` is set."""
        if not isinstance(load_optim_state, _Unset):
            load_optimizer_state = load_optim_state
        self.wait()
        if not self.dir_is_checkpoint(dir):
            raise CheckpointError(f"{dir}: not a complete checkpoint (no {MARKER} marker)")
        if storage.is_url(dir) and (self.pre_download or self.load_thread_count):
            with downloaded(dir, self.work_root, self.load_thread_count, self.process_group, this_process_only) as copy:
                return self._load(copy, train_module, load_optimizer_state, load_trainer_state, this_process_only)
        return self._load(dir, train_module, load_optimizer_state, load_trainer_state, this_process_only)

    def _load(
        self,
        dir: str,
        train_module: ModelState,
        load_optimizer_state: bool | None,
        load_trainer_state: bool | None,
        this_process_only: bool,
    ) -> dict[str, Any] | None:
        model_dir = storage.join(dir, MODEL_AND_OPTIM_DIR)
        if load_trainer_state is None:
            load_trainer_state = storage.exists(storage.join(dir, TRAIN_DIR, "rank0.pt"))
        if load_optimizer_state is None:
            load_optimizer_state = has_optimizer_state(model_dir)
        # Read the small trainer state first so a corrupt file is found before the model is touched.
        trainer_state, unreadable = None, None
        if load_trainer_state:
            try:
                trainer_state = read_trainer_state(dir, get_rank())
            except CheckpointError as error:
                unreadable = error
        if not this_process_only:
            # One rank's unreadable file must fail the load on every rank: a rank that went on alone would wait
            # in the collective load while the others fall back to an older checkpoint.
            failed = ranks_where(unreadable is not None, self.process_group)
            if failed and unreadable is None:
                raise CheckpointError(f"{dir}: rank(s) {', '.join(map(str, failed))} cannot read their trainer state")
        if unreadable is not None:
            raise unreadable
        state = train_module.state_dict_to_load(load_optimizer_state=load_optimizer_state)
        # the extra state left out of the read keeps its current values when loaded back below
        to_read = state if load_optimizer_state else {key: value for key, value in state.items() if key == "model"}
        # DCP wraps every rank's failure (missing, truncated or mismatched data) in a CheckpointException,
        # which is a BaseException; either way the checkpoint cannot be loaded into this module.
        try:
            with quiet_metadata_fallback():
                dcp.load(
                    to_read,
                    checkpoint_id=model_dir,
                    storage_reader=storage_reader(model_dir),
                    process_group=self.process_group,
                    no_dist=this_process_only or not is_distributed(),
                )
        except (Exception, CheckpointException) as error:
            described = describe_error(error)
            if MISSING_KEY in described:  # the checkpoint's index is whole and lacks what this run's state needs
                raise CheckpointMismatchError(
                    f"{dir}: the checkpoint's model and optimizer state do not fit this run's ({described}); the "
                    "model, the optimizer or its parameter groups differ from the run that saved it: use that run's "
                    "config, or trainer.load_optim_state: false to start a new optimizer from its weights"
                ) from error
            raise CheckpointError(f"{dir}: cannot load model and optimizer state: {described}") from error
        train_module.load_state_dict(state)
        return trainer_state

    # --- other files ----------------------------------------------------------------------
    def write_file(self, dir: str, fname: str, contents: str | bytes) -> str:
        """Write ``contents`` to ``dir/fname`` (a local folder or a URL) and return its path, as OLMo-core's; a
        remote ``dir`` gets it from a local copy in its work folder, uploaded in the background when this
        checkpointer has an uploader. An existing file is replaced. Call it on one rank."""
        target = storage.join(dir, fname)
        data = contents.encode() if isinstance(contents, str) else contents
        local_dir = self.work_folder(dir)
        if storage.is_url(local_dir):  # no uploader: written to the URL directly
            storage.write_bytes(target, data)
            return target
        local = os.path.join(local_dir, fname)
        os.makedirs(os.path.dirname(local) or ".", exist_ok=True)
        with open(f"{local}.tmp", "wb") as handle:
            handle.write(data)
        os.replace(f"{local}.tmp", local)  # a reader never sees half a file
        if local != target:
            self.uploader.upload_file(local, target)
        return target

    # --- finding and removing -----------------------------------------------------------
    @staticmethod
    def dir_is_checkpoint(dir: str) -> bool:
        """True when ``dir`` is a complete checkpoint (it holds the ``.complete`` marker)."""
        return storage.exists(storage.join(dir, MARKER))

    @classmethod
    def find_checkpoints(cls, dir: str, ephemeral: bool | None = None) -> list[tuple[int, str]]:
        """The complete ``stepN`` checkpoints in ``dir`` as ``(step, path)``, oldest first; ``ephemeral`` True
        or False keeps only those whose marker says they are (or are not) ephemeral (OLMo-core's filter)."""
        found = []
        for name in storage.listdir(dir):
            match = STEP_DIR.match(name)
            path = storage.join(dir, name)
            if match and cls.dir_is_checkpoint(path) and (ephemeral is None or is_ephemeral(path) == ephemeral):
                found.append((int(match.group(1)), path))
        return sorted(found)

    @classmethod
    def contains_checkpoint(cls, dir: str) -> bool:
        """True when ``dir`` is a complete checkpoint or holds at least one complete ``stepN`` checkpoint (as
        OLMo-core's)."""
        return cls.dir_is_checkpoint(dir) or bool(cls.find_checkpoints(dir))

    @classmethod
    def latest_checkpoint(cls, dir: str) -> str:
        """The path of the newest complete checkpoint in ``dir``."""
        found = cls.find_checkpoints(dir)
        if not found:
            raise FileNotFoundError(f"no complete checkpoint (stepN folder with a {MARKER} marker) in {dir}")
        return found[-1][1]

    @classmethod
    def clean_incomplete(cls, folder: str) -> list[str]:
        """Remove ``stepN`` folders without a marker and leftover temporary folders; return what was removed.

        A temporary folder that is complete (a save crashed between writing the marker and the rename)
        is finished instead: renamed to its ``stepN`` name. Call only while no save is in flight.
        """
        removed = []
        names = storage.listdir(folder)
        for name in names:
            path = storage.join(folder, name)
            if STEP_DIR.match(name) and storage.isdir(path) and not cls.dir_is_checkpoint(path):
                storage.rm(path)
                removed.append(path)
        for name in names:
            path = storage.join(folder, name)
            if not _TEMP_STEP_DIR.match(name):
                continue
            final = path[: -len(TEMP_SUFFIX)]
            if cls.dir_is_checkpoint(path) and not storage.exists(final):
                storage.rename(path, final)
                log.info("finished interrupted save: renamed %s to %s", path, final)
            else:
                storage.rm(path)
                removed.append(path)
        return removed

    def delete(self, dir: str) -> None:
        """Remove the checkpoint ``dir``; its marker goes first so a half-deleted folder is never loaded.

        A local copy that an upload still reads is removed once that upload is done; a remote ``dir``
        uploaded in the background is removed remotely after the uploads queued before.
        """
        local = self.work_folder(dir)
        if local != dir:
            self.uploader.delete_folder(dir, marker=MARKER)
        if self._read_by_uploads(local):
            self._deferred_deletes.append(local)
        else:
            remove_checkpoint(local)
        self._delete_deferred()


def _temp_dir(dir: str) -> str:
    return str(dir).rstrip("/") + TEMP_SUFFIX


def _barrier(group: dist.ProcessGroup | None) -> None:
    if is_distributed():
        dist.barrier(group=group)
