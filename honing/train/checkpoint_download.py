"""A remote checkpoint copied to a local folder before it is read (OLMo-core's ``pre_download``), its files
fetched by several threads at once (``load_thread_count``); the copy is removed once loaded."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import torch.distributed as dist

from honing import storage
from honing.distributed import get_rank, is_distributed
from honing.train.remote import work_folder_for

log = logging.getLogger(__name__)


def download_folder(url: str, local: str, threads: int = 1) -> list[str]:
    """Copy every file under the remote folder ``url`` to ``local`` (replacing it) with ``threads`` threads;
    return the local files' paths."""
    fs, root = storage.filesystem(url)
    root = root.rstrip("/")
    storage.rm(local)
    pairs = []
    for remote in fs.find(root):
        target = os.path.join(local, *remote[len(root) :].lstrip("/").split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        pairs.append((remote, target))
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="honing-download") as pool:
        list(pool.map(lambda pair: fs.get_file(*pair), pairs))
    return [target for _, target in pairs]


@contextlib.contextmanager
def downloaded(
    url: str,
    work_root: str | None,
    threads: int | None,
    group: dist.ProcessGroup | None = None,
    this_process_only: bool = False,
) -> Iterator[str]:
    """A local copy of the remote checkpoint ``url`` for the duration of the block: rank 0 fetches it into the
    work folder (shared by the ranks of a node, as for saving) while the others wait, then every rank reads it."""
    local = work_folder_for(url, work_root) + "-download"
    together = is_distributed() and not this_process_only
    if get_rank() == 0 or this_process_only:
        files = download_folder(url, local, threads or 1)
        log.info("fetched %d files of %s to %s before loading it", len(files), url, local)
    if together:
        dist.barrier(group=group)
    try:
        yield local
    finally:
        if together:
            dist.barrier(group=group)  # every rank has read it
        if get_rank() == 0 or this_process_only:
            storage.rm(local)
