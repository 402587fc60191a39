"""File helpers that treat local paths and fsspec URLs (``s3://``, ``memory://`` ...) alike."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import IO, Any

import fsspec
import fsspec.config

from honing.config.redact import REDACTED, is_secret_key

# Fault injection for tests (a full disk, a kill mid-write): called as ``hook(path, nbytes)`` before bytes go
# to a file written through honing, checkpoints' DCP files included. None in a normal run: one check per write.
_write_hook: Callable[[str, int], None] | None = None

# s3fs names its credentials ``key`` and ``secret``, which the config's secret-name rule does not catch.
_SECRET_OPTIONS = ("key", "secret", "token", "password")


def set_storage_options(protocol: str, **options: object) -> None:
    """Options every ``protocol`` file system of this process is created with (e.g. ``s3``: endpoint_url,
    key, secret); none given: back to the library defaults (for S3, the standard ``AWS_*`` variables).

    They go into fsspec's own defaults, so every fsspec user (data sources, DCP's readers) sees them.
    """
    if options:
        fsspec.config.conf[protocol] = dict(options)
    else:
        fsspec.config.conf.pop(protocol, None)


def s3_storage_options(
    *,
    endpoint_url: str | None = None,
    aws_access_key_id: str | None = None,
    aws_secret_access_key: str | None = None,
    region: str | None = None,
) -> dict[str, Any]:
    """s3fs options for the values given; unset ones fall back to ``AWS_ENDPOINT_URL``,
    ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and ``AWS_DEFAULT_REGION``."""
    options: dict[str, Any] = {}
    if endpoint_url:
        options["endpoint_url"] = endpoint_url
    if aws_access_key_id:
        options["key"] = aws_access_key_id
    if aws_secret_access_key:
        options["secret"] = aws_secret_access_key
    if region:
        options["client_kwargs"] = {"region_name": region}
    return options


def set_write_hook(hook: Callable[[str, int], None] | None) -> None:
    """Install ``hook(path, nbytes)``, called before each write to a file (it may raise ``OSError`` or kill
    the process, to test faults); None removes it."""
    global _write_hook
    _write_hook = hook


def before_write(path: str, nbytes: int) -> None:
    """Tell the write hook (if any) that ``nbytes`` are about to be written to ``path``."""
    if _write_hook is not None:
        _write_hook(str(path), nbytes)


class HookedStream:
    """A writable file that reports each write to the write hook first (what DCP's writers write through)."""

    def __init__(self, stream: IO[bytes], path: str):
        self._stream = stream
        self._path = str(path)

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Report, then write ``data``."""
        before_write(self._path, memoryview(data).nbytes)
        return self._stream.write(data)

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def redact_secrets(text: str) -> str:
    """``text`` with every configured storage secret (key, secret, token ...) replaced by ``***``."""
    for options in fsspec.config.conf.values():
        for key, value in options.items() if isinstance(options, dict) else ():
            if isinstance(value, str) and value and (key in _SECRET_OPTIONS or is_secret_key(key)):
                text = text.replace(value, REDACTED)
    return text


def filesystem(path: str, **overrides: object) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec file system for ``path`` (local paths too) and the path inside it; ``overrides`` are
    merged over the configured storage options (dict values key by key)."""
    if not overrides:
        return fsspec.core.url_to_fs(path)
    protocol = fsspec.core.split_protocol(path)[0] or "file"
    cls = fsspec.get_filesystem_class(protocol)
    options = fsspec.config.apply_config(cls, {})
    for key, value in overrides.items():
        options[key] = (
            {**options[key], **value} if isinstance(value, dict) and isinstance(options.get(key), dict) else value
        )
    return fsspec.core.url_to_fs(path, **options)


def is_url(path: str) -> bool:
    """True for an fsspec URL such as ``s3://bucket/key``; False for a local path."""
    return "://" in str(path) and not str(path).startswith("file://")


def _local(path: str) -> str:
    path = str(path)
    return path[len("file://") :] if path.startswith("file://") else path


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
        fs.invalidate_cache(root)  # object-store listings are cached; another process may have written since
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
        root, destination = root.rstrip("/"), _fs(target)[1].rstrip("/")
        # File by file: s3fs's recursive mv also copies the folder itself, a key that does not exist.
        for path in fs.find(root):
            fs.copy(path, destination + path[len(root) :])
        fs.rm(root, recursive=True)
    else:
        os.rename(_local(source), _local(target))


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to ``path``, creating its folder; local files are fsynced so that a marker
    written afterwards never points at data still in the page cache."""
    before_write(path, len(data))
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


def file_sizes(folder: str, **overrides: object) -> dict[str, int]:
    """Every file under ``folder``, recursively, as ``relative/path`` → size in bytes; empty when absent
    (``overrides``: storage options, as for ``filesystem``)."""
    if not is_url(folder):
        local, sizes = _local(folder), {}
        for parent, _, names in os.walk(local):
            for name in names:
                path = os.path.join(parent, name)
                sizes[os.path.relpath(path, local).replace(os.sep, "/")] = os.path.getsize(path)
        return sizes
    fs, root = filesystem(folder, **overrides)
    fs.invalidate_cache(root)  # another process (or a server restart) may have changed it
    root = root.rstrip("/")
    found = fs.find(root, detail=True) if fs.exists(root) else {}
    return {name[len(root) + 1 :]: int(info["size"]) for name, info in found.items() if name != root}
