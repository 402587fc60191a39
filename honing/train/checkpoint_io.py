"""How a checkpoint's parts lie on disk: DCP storage readers and writers (through the storage layer's write
hook, so faults can be injected in tests), the per-rank trainer state (serialized and checked at save time,
read with ``weights_only=True``) and the errors they raise. ``honing.train.checkpoint`` decides when and where.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import logging
import os
import re
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import FileSystem

from honing import storage
from honing.errors import CheckpointError

MODEL_AND_OPTIM_DIR = "model_and_optim"
TRAIN_DIR = "train"
MARKER = ".complete"  # written last: a folder holding it is a complete checkpoint
STEP_DIR = re.compile(r"^step(\d+)$")


def is_ephemeral(dir: str) -> bool:
    """Whether the complete checkpoint ``dir`` was saved as ephemeral (its marker says so)."""
    try:
        return bool(json.loads(storage.read_bytes(storage.join(dir, MARKER)) or b"{}").get("ephemeral", False))
    except (OSError, ValueError):
        return False  # a marker of an older honing, or unreadable: not marked ephemeral


def remove_checkpoint(dir: str) -> None:
    """Remove the checkpoint ``dir``, its marker first so that a half-deleted folder is never loaded."""
    storage.rm(storage.join(dir, MARKER))
    storage.rm(dir)


def read_trainer_state(dir: str, rank: int) -> dict[str, Any]:
    """Rank ``rank``'s trainer state, or rank 0's (flagged) when the run now has more ranks."""
    path = storage.join(dir, TRAIN_DIR, f"rank{rank}.pt")
    world_size_changed = not storage.exists(path)
    if world_size_changed:  # more ranks now than when saved: start from rank 0's progress
        path = storage.join(dir, TRAIN_DIR, "rank0.pt")
        if not storage.exists(path):
            wanted = (
                f"{TRAIN_DIR}/rank0.pt" if rank == 0 else f"neither {TRAIN_DIR}/rank{rank}.pt nor {TRAIN_DIR}/rank0.pt"
            )
            raise CheckpointError(f"{dir}: the trainer state is missing ({wanted})")
    try:
        state = torch.load(io.BytesIO(storage.read_bytes(path)), map_location="cpu", weights_only=True)
    except Exception as error:
        raise CheckpointError(
            f"{dir}: cannot read trainer state {path}: {describe_error(error)} (truncated or corrupt?)"
        ) from error
    if not isinstance(state, dict):
        raise CheckpointError(f"{dir}: trainer state {path} holds a {type(state).__name__}, expected a dict")
    if world_size_changed:
        state["_world_size_changed"] = True
    return state


class _MetadataFallbackFilter(logging.Filter):
    """Drops DCP's tracebacks for an unreadable ``.metadata`` (logged on the root logger before it raises):
    the CheckpointError raised after them already says what is wrong, in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == "root" and "metadata is not found" in record.getMessage())


@contextlib.contextmanager
def quiet_metadata_fallback() -> Iterator[None]:
    """While loading: DCP's tracebacks for an unreadable ``.metadata`` are dropped (our error says it)."""
    quiet = _MetadataFallbackFilter()
    logging.getLogger().addFilter(quiet)
    try:
        yield
    finally:
        logging.getLogger().removeFilter(quiet)


class _HookedFileSystem(FileSystem):
    """DCP's local file system whose written files report to ``storage``'s write hook (fault injection)."""

    @contextlib.contextmanager
    def create_stream(self, path: str | os.PathLike, mode: str) -> Iterator[Any]:
        with super().create_stream(path, mode) as stream:
            yield storage.HookedStream(stream, str(path)) if "w" in mode else stream


def storage_writer(path: str, thread_count: int = 1) -> dcp.StorageWriter | None:
    """DCP's writer for ``path``, writing each rank's files with ``thread_count`` threads."""
    # Local folders get DCP's file-system writer explicitly: inferring it from the path requires a
    # writable existing parent. For URLs, DCP picks its fsspec writer from checkpoint_id unless threads are asked.
    if storage.is_url(path):
        return None if thread_count == 1 else FsspecWriter(path, thread_count=thread_count)
    writer = dcp.FileSystemWriter(path, thread_count=thread_count)
    writer.fs = _HookedFileSystem()  # so a test's injected disk-full or kill can land inside the DCP write
    return writer


def storage_reader(path: str) -> dcp.StorageReader | None:
    # Explicit for the same reason: inference would refuse a checkpoint in a read-only folder.
    return None if storage.is_url(path) else dcp.FileSystemReader(path)


def has_optimizer_state(model_dir: str) -> bool:
    """True when the DCP checkpoint in ``model_dir`` holds optimizer state (its metadata names ``optim`` keys);
    True as well when the metadata cannot be read, so that the load itself reports what is wrong."""
    try:
        reader = storage_reader(model_dir) or FsspecReader(model_dir)
        keys = reader.read_metadata().state_dict_metadata
    except Exception:
        return True
    return any(key == "optim" or key.startswith("optim.") for key in keys)


def copy_to_cpu(value: Any) -> Any:
    """A deep copy with every tensor copied to CPU memory, so training may change the live tensors."""
    if isinstance(value, torch.Tensor):
        if _is_tensor_subclass(value):
            return _copy_subclass_to_cpu(value.detach())
        # .to(copy=True) copies a DTensor's local shard and keeps its placement, which DCP needs.
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {key: copy_to_cpu(item) for key, item in value.items()}
    if type(value) in (list, tuple):
        return type(value)(copy_to_cpu(item) for item in value)
    return copy.deepcopy(value)


def _is_tensor_subclass(value: torch.Tensor) -> bool:
    """True for a tensor subclass made of inner tensors (torchao's NF4 weights, 8-bit optimizer states), not a
    DTensor (whose ``.to(copy=True)`` copies its shard)."""
    from torch.distributed.tensor import DTensor

    return hasattr(value, "__tensor_flatten__") and not isinstance(value, DTensor)


def _copy_subclass_to_cpu(value: Any) -> Any:
    """A CPU copy of a tensor subclass, rebuilt from copies of its inner tensors: torchao's subclasses take no
    ``copy=`` argument, and their ``clone`` may re-quantize rather than copy."""
    names, context = value.__tensor_flatten__()
    inner = {name: copy_to_cpu(getattr(value, name)) for name in names}
    return type(value).__tensor_unflatten__(inner, context, value.size(), value.stride())


def serialize_trainer_state(state: dict[str, Any], dir: str) -> bytes:
    """``torch.save`` bytes of ``state``, checked to load back with ``weights_only=True``.

    Checking now turns a state that could never be resumed from into an error at save time.
    """
    buffer = io.BytesIO()
    try:
        torch.save(state, buffer)
        torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)
    except Exception as error:
        raise CheckpointError(
            f"{dir}: the trainer state cannot be checkpointed: {describe_error(error)}; callbacks' and the data "
            f"loader's state_dict() must hold only numbers, strings, lists, tuples, dicts and tensors"
        ) from error
    return buffer.getvalue()


def describe_error(error: BaseException) -> str:
    """The useful first line of an error message (torch's weights_only errors bury it mid-paragraph)."""
    if isinstance(error, CheckpointException) and error.failures:
        rank, (cause, _) = next(iter(sorted(error.failures.items())))
        return f"rank {rank}: {describe_error(cause)}"
    message = str(error)
    if "WeightsUnpickler error: " in message:
        message = message.split("WeightsUnpickler error: ", 1)[1]
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    first = lines[0] if lines else ""
    if len(first) > 300:
        first = first[:300] + "..."
    if not first and isinstance(error, EOFError):
        first = "a file ends early (truncated?)"
    return f"{type(error).__name__}: {first}" if first else type(error).__name__
