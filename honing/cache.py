"""Where honing keeps its on-disk caches and work folders, how an entry is keyed, and how it is written."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Iterable
from typing import BinaryIO


def default_cache_dir() -> str:
    """``$HONING_CACHE_DIR`` if set, else ``~/.cache/honing``."""
    return os.environ.get("HONING_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "honing")


def content_hash(parts: Iterable[str | bytes]) -> str:
    """sha256 hex digest of a sequence of strings, unambiguous about where one part ends."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8") if isinstance(part, str) else part
        # The length prefix keeps ["ab", "c"] and ["a", "bc"] apart.
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def atomic_write(path: str, write: Callable[[BinaryIO], None]) -> None:
    """Write ``path`` through ``write(file)`` so readers never see a partial file."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    # A unique temp name per writer: several ranks may build the same cache entry at once.
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as file:
            write(file)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
