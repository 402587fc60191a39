"""A run over several machines needs its save folder on storage every machine sees: every rank writes its own
shards of each checkpoint there, and a resume reads all of them. A local path on each node's own disk would split
every checkpoint over the nodes (none of them whole), which is found out only when a resume fails; this check
finds it at start instead."""

from __future__ import annotations

import os
import secrets

import torch.distributed as dist

from honing import storage
from honing.distributed import get_rank, get_world_size, is_distributed, ranks_where, shared_filesystem
from honing.errors import ConfigError


def spans_several_nodes() -> bool:
    """True when the run's processes are on more than one machine (torchrun's local world is smaller)."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", get_world_size()))
    return is_distributed() and local < get_world_size()


def check_shared_folder(folder: str, key: str = "trainer.save_folder") -> None:
    """Refuse, on every rank, a local ``folder`` that some ranks do not see: rank 0 leaves a file with a random
    name there, every rank looks for it. Remote folders (``s3://`` ...) are shared by nature; one machine too."""
    if storage.is_url(folder) or not spans_several_nodes() or shared_filesystem():
        return
    if shared_filesystem() is False:
        raise ConfigError(
            f"{key}: {folder} is a local folder on each machine (prepare_training_environment was told "
            "shared_filesystem=False), so each checkpoint would be split over the machines' own disks; use an "
            "s3:// folder"
        )
    token = [secrets.token_hex(8) if get_rank() == 0 else None]
    dist.broadcast_object_list(token, src=0)
    probe = storage.join(folder, f".honing-shared-{token[0]}")
    if get_rank() == 0:
        storage.makedirs(folder)
        storage.write_bytes(probe, token[0].encode())
    dist.barrier()
    seen = storage.exists(probe) and storage.read_bytes(probe).decode() == token[0]
    blind = ranks_where(not seen)
    dist.barrier()  # every rank has looked before rank 0 removes the probe
    if get_rank() == 0:
        storage.rm(probe)
    if blind:
        raise ConfigError(
            f"{key}: {folder} is not shared by every machine: rank(s) {', '.join(map(str, blind))} cannot see the "
            "file rank 0 wrote there, so each checkpoint would be split over the machines' own disks; use a "
            "shared file system (NFS, Lustre ...) or an s3:// folder"
        )
