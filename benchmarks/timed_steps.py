"""What the trainer comparisons share: a clock over the timed steps (device-synced, with the memory peak) and the
plumbing of a one-process group (torchrun's variables, a free port, FSDP2 kept on one process)."""

from __future__ import annotations

import os
import resource
import socket
import statistics
import time
from typing import Any


class StepClock:
    """End times (after a device sync) of the last warm-up step and of every timed step; the CUDA memory peak is
    reset at the end of warm-up, so it covers the timed steps."""

    def __init__(self, device: Any, warmup: int, steps: int):
        self.device, self.warmup, self.steps = device, warmup, steps
        self.ends: list[float] = []

    def step_end(self, step: int) -> None:
        """Call at the end of step ``step`` (numbered from 1)."""
        import torch

        if not self.warmup <= step <= self.warmup + self.steps:
            return
        if self.device.type == "cuda":
            # A sync each step costs nothing measurable at steps of 100s of ms, and makes each step's time its own.
            torch.cuda.synchronize(self.device)
        self.ends.append(time.perf_counter())
        if step == self.warmup and self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def result(self, tokens_per_step: int) -> dict[str, float]:
        """Tokens/s at the median step time and over the whole window, and the peak memory in MiB."""
        import torch

        if len(self.ends) != self.steps + 1:
            raise RuntimeError(f"timed {len(self.ends) - 1} steps, expected {self.steps}")
        durations = [later - earlier for earlier, later in zip(self.ends, self.ends[1:])]
        if self.device.type == "cuda":
            peak_mib = torch.cuda.max_memory_allocated(self.device) / 2**20
        else:
            peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        return {
            "tokens_per_s": tokens_per_step / statistics.median(durations),
            "window_tokens_per_s": tokens_per_step * len(durations) / (self.ends[-1] - self.ends[0]),
            "median_step_s": statistics.median(durations),
            "peak_memory_mib": peak_mib,
        }


def join_one_rank_group(device: Any, port: int, *, init: bool) -> None:
    """Set torchrun's variables for one process (accelerate reads them) and, when ``init``, join the group."""
    import torch
    import torch.distributed as dist

    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1"
    )
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if init:  # as honing's prepare_training_environment would with several processes (it skips one)
        dist.init_process_group(backend="cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo")


def force_fsdp_on_one_process() -> None:
    """Keep ``strategy="fsdp"`` as FSDP2 in honing's ``parallelize`` on one process (it resolves it to ``none``)."""
    from honing.models import parallel

    resolve = parallel.resolve_strategy
    parallel.resolve_strategy = lambda strategy, world_size: (
        "fsdp" if strategy == "fsdp" else resolve(strategy, world_size)
    )


def free_port() -> int:
    """A TCP port nothing listens on now, for the one-rank group's rendezvous."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
