"""The CPU time this machine's cores have been busy, sampled when honing is imported, so that the seconds a run spends
importing and building are a window over which to see how many cores other processes use now.

The one-minute load average lags what it measures: right after ``pip install`` ends it still reads about one busy
core, and ``make train`` on a fresh machine took 1 thread of 2 free ones (5.5 minutes instead of 3). The kernel's
per-core busy time in ``/proc/stat``, less this process's own CPU time over the same seconds, is the load of the
other processes during that window. Standard library only: ``honing/__init__.py`` takes the first sample.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

#: below this many seconds a window's busy time is too few clock ticks (10 ms each) to say much
MIN_WINDOW_SECONDS = 0.5
# /proc/stat's per-core columns: user nice system idle iowait irq softirq steal guest guest_nice; guest time is
# already inside user, idle and iowait are not busy, steal is the hypervisor's (no process here ran then)
BUSY_COLUMNS = (0, 1, 2, 5, 6)
STAT_PATH = "/proc/stat"


def usable_cpus() -> set[int]:
    """The CPUs this process may run on (its affinity, which containers and ``taskset`` narrow)."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return set(range(os.cpu_count() or 1))


def busy_seconds(stat_text: str, cpus: set[int], ticks_per_second: float) -> float | None:
    """The busy seconds ``/proc/stat``'s text counts over ``cpus`` since boot; None when it names none of them."""
    total, seen = 0, False
    for line in stat_text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu" or not name[3:].isdigit() or int(name[3:]) not in cpus:
            continue
        columns = rest.split()
        total += sum(int(columns[index]) for index in BUSY_COLUMNS if index < len(columns))
        seen = True
    return total / ticks_per_second if seen else None


def read_busy_seconds(cpus: set[int]) -> float | None:
    """This machine's busy seconds over ``cpus`` now; None where there is no ``/proc/stat`` (not Linux)."""
    try:
        with open(STAT_PATH, encoding="ascii") as handle:
            text = handle.read()
        return busy_seconds(text, cpus, float(os.sysconf("SC_CLK_TCK")))
    except (OSError, ValueError, AttributeError):
        return None


@dataclass(frozen=True)
class CpuSample:
    """One moment: wall clock, this process's CPU time, and the machine's busy time over this process's CPUs."""

    wall: float
    own: float
    busy: float | None

    @classmethod
    def now(cls, cpus: set[int] | None = None) -> CpuSample:
        """A sample taken now over ``cpus`` (default: the ones this process may run on)."""
        return cls(time.monotonic(), time.process_time(), read_busy_seconds(usable_cpus() if cpus is None else cpus))

    def other_busy_cores(self, later: CpuSample) -> float | None:
        """The cores other processes kept busy, on average, from this sample to ``later`` (this process's own CPU
        time taken out); None without busy times or over a window shorter than ``MIN_WINDOW_SECONDS``."""
        window = later.wall - self.wall
        if self.busy is None or later.busy is None or window < MIN_WINDOW_SECONDS:
            return None
        return max(0.0, (later.busy - self.busy) - (later.own - self.own)) / window


#: the sample at import: a run's first window starts here
AT_IMPORT = CpuSample.now()
