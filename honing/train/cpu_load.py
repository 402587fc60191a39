"""How many of this machine's cores other processes keep busy, and the CPU threads a run should use around them.

torch's default thread count is every core it sees. On a shared machine that oversubscribes: on a busy 2-core
machine 2 threads made a CPU run 4x slower than 1 (issue 45). The cores' busy time since the last look (at first,
since honing was imported: the run's own imports and setup are the window), less this process's own, says how many
cores the other processes are running on, so a run with ``trainer.num_threads`` unset takes the cores left free.
Where the kernel gives no busy times (not Linux) the one-minute load average stands in, less this process's share.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

from honing import cpu_busy

# The kernel's load average is an exponentially damped count of runnable tasks with a one-minute time constant.
LOAD_WINDOW_SECONDS = 60.0


@dataclass(frozen=True)
class CpuLoad:
    """The cores this process may run on, and how many of them other processes keep busy."""

    cores: int
    other_load: float

    @property
    def busy_cores(self) -> int:
        """The other load as whole cores (half a core and up counts as one)."""
        return math.floor(self.other_load + 0.5)

    @property
    def free_cores(self) -> int:
        """The cores left to this process: never below 1."""
        return max(1, self.cores - self.busy_cores)

    def leaves_free(self, threads: int) -> bool:
        """Whether other processes leave ``threads`` cores to themselves (a probe's rate is then this machine's)."""
        return self.busy_cores + threads <= self.cores

    def describe(self) -> str:
        """``load 1.8 from other processes on 2 cores``."""
        return f"load {self.other_load:.1f} from other processes on {self.cores} core{'s' if self.cores != 1 else ''}"


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, which containers and ``taskset`` narrow)."""
    return len(cpu_busy.usable_cpus())


def own_load_share(cpu_seconds: float) -> float:
    """What this process has added to the one-minute load average by running ``cpu_seconds`` (its imports
    and setup): a task runnable for ``t`` seconds raises the damped average by ``1 - exp(-t / 60)``."""
    return 1.0 - math.exp(-max(cpu_seconds, 0.0) / LOAD_WINDOW_SECONDS)


class LoadWatch:
    """Reads the other processes' load over the window since its last reading (the first: since honing's import)."""

    def __init__(self, start: cpu_busy.CpuSample):
        self.start = start
        self.last = start

    def read(self) -> CpuLoad:
        """The load now: measured over the latest window that is long enough, else the load average."""
        now = cpu_busy.CpuSample.now()
        for since in (self.last, self.start):
            busy = since.other_busy_cores(now)
            if busy is not None:
                self.last = now
                return CpuLoad(usable_cores(), busy)
        return load_average_less_own()


def load_average_less_own() -> CpuLoad:
    """The one-minute load average less this process's own share (a run has just spent seconds importing)."""
    try:
        one_minute = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average here: assume the cores are free
        one_minute = 0.0
    return CpuLoad(usable_cores(), max(0.0, one_minute - own_load_share(time.process_time())))


_WATCH = LoadWatch(cpu_busy.AT_IMPORT)


def current_load() -> CpuLoad:
    """This machine's load now from other processes than this one."""
    return _WATCH.read()


def choose_num_threads(load: CpuLoad) -> tuple[int, str]:
    """The CPU threads for a run whose ``trainer.num_threads`` is unset: the cores other processes leave free,
    and one line saying so (and how to choose otherwise)."""
    threads = load.free_cores
    return threads, (
        f"trainer.num_threads unset: using {threads} CPU thread{'s' if threads != 1 else ''} ({load.describe()}); "
        "set trainer.num_threads=N to choose"
    )
