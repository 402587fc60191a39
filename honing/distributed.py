"""Process-group set-up and rank helpers: the only place that calls ``init_process_group``."""

from __future__ import annotations

import logging
import os
import random
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from honing.errors import ConfigError

log = logging.getLogger(__name__)

_timeout = timedelta(minutes=10)  # the run's collective timeout, also given to groups created later
_shared_filesystem: bool | None = None  # prepare_training_environment's word on a local save folder's reach

#: OLMo-core's LogFilterType values: which ranks log below WARNING
LOG_FILTER_TYPES = ("rank0_only", "local_rank0_only", "all_ranks")


def is_distributed() -> bool:
    """True inside an initialised process group."""
    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    """This process's global rank (0 when not distributed)."""
    return dist.get_rank() if is_distributed() else 0


def get_world_size() -> int:
    """The number of processes (1 when not distributed)."""
    return dist.get_world_size() if is_distributed() else 1


def get_local_rank() -> int:
    """This process's rank on its node, as torchrun sets it."""
    return int(os.environ.get("LOCAL_RANK", 0))


def is_rank0() -> bool:
    """True on the process that prints and writes shared files."""
    return get_rank() == 0


def print0(message: str) -> None:
    """Print on rank 0 only (flushed: a run's lines interleave with other processes' logs)."""
    if is_rank0():
        print(message, flush=True)


def launched_by_torchrun() -> bool:
    """True when torchrun (or another launcher) set the rendezvous variables."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def default_device() -> torch.device:
    """CUDA (this process's local GPU) when available, else CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", get_local_rank())
    return torch.device("cpu")


def seed_all(seed: int) -> None:
    """Seed Python's, NumPy's and torch's (CPU and CUDA) random number generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


#: ``prepare_training_environment``'s default backend: nccl for CUDA tensors beside gloo for CPU ones (the
#: document's ``cpu:gloo,cuda:nccl``) where CUDA is available, else gloo alone
AUTO_BACKEND = "auto"


def pick_backend() -> str:
    """The backend ``backend="auto"`` joins with: OLMo-core's default where CUDA is available, else gloo."""
    return "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"


def prepare_training_environment(
    *,
    seed: int | None = None,
    backend: str | None = AUTO_BACKEND,
    timeout: timedelta = timedelta(seconds=900),
    log_filter_type: str | None = None,
    shared_filesystem: bool | None = None,
) -> None:
    """Seed every RNG; under torchrun also join the process group. As OLMo-core's: ``backend`` names it
    (``auto``, the default: nccl on CUDA beside gloo, gloo alone without CUDA; None: no process group, each
    process trains alone); a collective that waits longer than ``timeout`` (default 15 minutes, as OLMo-core's;
    recipes pass ``parallel.timeout_seconds``) fails the run; ``log_filter_type`` (``rank0_only``,
    ``local_rank0_only``, ``all_ranks``; None: ``$LOG_FILTER_TYPE``, else rank 0 only) says which ranks log
    honing's messages below WARNING; ``shared_filesystem`` True says a local save folder is shared by every machine
    (not probed), False that it is not (refused across machines), None probes it (``honing.train.shared_folder``).
    """
    global _timeout, _shared_filesystem
    _shared_filesystem = shared_filesystem
    launched = launched_by_torchrun() and not is_distributed() and int(os.environ["WORLD_SIZE"]) > 1
    if launched and backend is None:
        log.warning(
            "prepare_training_environment(backend=None): no process group, so each of the %s processes "
            "torchrun started trains alone",
            os.environ["WORLD_SIZE"],
        )
    elif launched:
        _timeout = timeout
        backend = pick_backend() if backend == AUTO_BACKEND else backend
        if torch.cuda.is_available():
            torch.cuda.set_device(get_local_rank())
        dist.init_process_group(backend=backend, timeout=timeout)
        log.info("joined process group: rank %d of %d (%s)", get_rank(), get_world_size(), backend)
    if seed is not None:
        seed_all(seed)
    set_log_filter(log_filter_type)


def set_log_filter(log_filter_type: str | None) -> None:
    """Let only the ranks ``log_filter_type`` names log honing's INFO messages (all ranks log warnings)."""
    choice = log_filter_type or os.environ.get("LOG_FILTER_TYPE") or "rank0_only"
    if choice not in LOG_FILTER_TYPES:
        raise ConfigError(f"log_filter_type: expected one of {', '.join(LOG_FILTER_TYPES)}, got {choice!r}")
    rank = get_rank() if is_distributed() else int(os.environ.get("RANK", 0))
    allowed = {"rank0_only": rank == 0, "local_rank0_only": get_local_rank() == 0, "all_ranks": True}[choice]
    logging.getLogger("honing").setLevel(logging.INFO if allowed else logging.WARNING)


def shared_filesystem() -> bool | None:
    """What ``prepare_training_environment(shared_filesystem=...)`` said (None: not said, probe)."""
    return _shared_filesystem


def teardown_training_environment(*, wait_for_peers: bool = False) -> None:
    """Leave the process group, if any; with ``wait_for_peers``, once every rank is leaving too."""
    if is_distributed():
        if wait_for_peers:
            # gloo closes a group's connections at once: a rank that leaves while a peer is still finishing
            # the last collective (a metric reduction, a checkpoint's barrier) can break that peer
            # (pytorch/gloo#155), so ranks that finished well leave together.
            dist.barrier()
        dist.destroy_process_group()


def new_background_group() -> dist.ProcessGroup:
    """A gloo group of every rank, with the run's timeout, for collectives in a background thread
    (metric reduction, checkpoint writes) that must not interleave with training's. Every rank must
    create it, in the same order relative to other groups."""
    return dist.new_group(backend="gloo", timeout=_timeout)


def barrier() -> None:
    """Wait for every rank (a no-op when not distributed)."""
    if is_distributed():
        dist.barrier()


def ranks_where(flag: bool, group: dist.ProcessGroup | None = None) -> list[int]:
    """The ranks of ``group`` whose ``flag`` is true (``[0]`` or ``[]`` when not distributed): every rank learns
    the same answer, so all take the same branch after a rank-local check."""
    if not is_distributed():
        return [0] if flag else []
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(group) == "nccl" else "cpu"
    flags = torch.zeros(dist.get_world_size(group), dtype=torch.int32, device=device)
    flags[dist.get_rank(group)] = int(flag)
    dist.all_reduce(flags, group=group)
    return [rank for rank, value in enumerate(flags.tolist()) if value]


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum ``tensor`` over ranks in place and return it (unchanged when not distributed)."""
    if is_distributed():
        dist.all_reduce(tensor)
    return tensor
