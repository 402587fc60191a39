"""The process's memory as the kernel counts it: resident set now, its anonymous part, and the resident peak."""

from __future__ import annotations

import sys
from dataclasses import dataclass

try:
    import resource
except ImportError:  # Windows
    resource = None  # type: ignore[assignment]

STATUS_FILE = "/proc/self/status"
FIELDS = {"VmRSS": "rss", "RssAnon": "anon_rss"}


@dataclass(frozen=True)
class ProcessMemory:
    """Bytes of this process's memory; ``None`` where the platform does not say.

    ``anon_rss`` is the resident memory no file backs (tensors, the allocator's heap): unlike ``rss``, it leaves out
    the pages of a memory-mapped checkpoint, which the kernel drops under pressure, so it is the figure that says
    whether a run fits."""

    rss: int | None = None
    anon_rss: int | None = None
    peak_rss: int | None = None


def process_memory() -> ProcessMemory:
    """This process's memory now (``/proc/self/status``, Linux only) and its peak since it began (``getrusage``: unlike
    ``VmHWM``, never reset by a write to ``/proc/self/clear_refs``)."""
    values: dict[str, int] = {}
    try:
        with open(STATUS_FILE) as status:
            for line in status:
                key, _, rest = line.partition(":")
                if key in FIELDS:
                    values[FIELDS[key]] = int(rest.split()[0]) * 1024  # the kernel writes kB
    except OSError:  # not Linux
        pass
    if resource is not None:
        max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        values["peak_rss"] = max_rss if sys.platform == "darwin" else max_rss * 1024  # Linux reports KiB
    return ProcessMemory(**values)
