"""File helpers that treat local paths and fsspec URLs (``s3://``, ``memory://`` ...) alike."""

from __future__ import annotations

import os
import shutil

import fsspec


def is_url(path: str) -> bool:
    """True for an fsspec URL such as ``s3://bucket/key``; False for a local path."""
    return "://" in str(path) and not str(path).startswith("file://")


def _local(path: str) -> str:
    path = str(path)
    return path[len("file://"):] if path.startswith("file://") else path


def _fs(path: str) -> tuple[fsspec.AbstractFileSystem, str]:
    return fsspec.core.url_to_fs(path)


def join(base: str, *parts: str) -> str:
    """``base/part/...`` with the separator the path's kind expects."""
    if is_url(base):
        return "/".join([str(base).rstrip("/"), *(part.strip("/") for part in parts)])
    return os.path.join(base, *parts)


def exists(path: str) -> bool:
    """True when a file or folder exists at ``path``."""
    if is_url(path):
        fs, root = _fs(path)
        return fs.exists(root)
    return os.path.exists(_local(path))


def isdir(path: str) -> bool:
    """True when ``path`` is a folder."""
    if is_url(path):
        fs, root = _fs(path)
        return fs.isdir(root)
    return os.path.isdir(_local(path))


def listdir(path: str) -> list[str]:
    """The names (not paths) directly inside folder ``path``; empty when it does not exist."""
    if is_url(path):
        fs, root = _fs(path)
        if not fs.isdir(root):
            return []
        return sorted(os.path.basename(entry.rstrip("/")) for entry in fs.ls(root, detail=False))
    local = _local(path)
    return sorted(os.listdir(local)) if os.path.isdir(local) else []


def makedirs(path: str) -> None:
    """Create folder ``path`` and its parents (no error if it exists)."""
    if is_url(path):
        fs, root = _fs(path)
        fs.makedirs(root, exist_ok=True)
    else:
        os.makedirs(_local(path), exist_ok=True)


def rm(path: str) -> None:
    """Remove a file or a whole folder (no error if it does not exist)."""
    if is_url(path):
        fs, root = _fs(path)
        if fs.exists(root):
            fs.rm(root, recursive=True)
        return
    local = _local(path)
    if os.path.isdir(local) and not os.path.islink(local):
        shutil.rmtree(local)
    elif os.path.lexists(local):
        os.remove(local)


def rename(source: str, target: str) -> None:
    """Move ``source`` to ``target`` (which must not exist): atomic on a local file system, a copy
    then delete on object stores."""
    if is_url(source):
        fs, root = _fs(source)
        fs.mv(root, _fs(target)[1], recursive=True)
    else:
        os.rename(_local(source), _local(target))


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to ``path``, creating its folder; local files are fsynced so that a marker
    written afterwards never points at data still in the page cache."""
    if is_url(path):
        fs, root = _fs(path)
        fs.makedirs(os.path.dirname(root), exist_ok=True)
        with fs.open(root, "wb") as handle:
            handle.write(data)
        return
    local = _local(path)
    os.makedirs(os.path.dirname(local) or ".", exist_ok=True)
    with open(local, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def read_bytes(path: str) -> bytes:
    """The whole contents of the file at ``path``."""
    if is_url(path):
        with fsspec.open(path, "rb") as handle:
            return handle.read()
    with open(_local(path), "rb") as handle:
        return handle.read()
