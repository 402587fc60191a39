"""Fault suite, kill -9: SIGKILL a tiny training run at N moments (default 20: random times and random byte
offsets inside synchronous and asynchronous checkpoint writes: DCP data, trainer state, the marker), resume
each, and check the resumed weights are bit-identical to an uninterrupted run's. Prints one line per moment
and exits 1 if any moment lost something. ``tests/faults/test_kill.py`` runs three such moments in the suite.

    .venv/bin/python benchmarks/fault_kill.py [--moments 20] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # for tests.faults.kill_moments and tests.helpers (the tiny run the tests use)


def main() -> int:
    """Run the moments; the exit code says whether every one resumed exactly."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moments", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    from tests.faults.kill_moments import check_moment, random_moments, train

    with tempfile.TemporaryDirectory() as root:
        reference = train(Path(root) / "reference", async_save=False)
        started = time.monotonic()
        train(Path(root) / "timed", async_save=False)
        run_seconds = time.monotonic() - started
        failures = 0
        for index, moment in enumerate(random_moments(args.moments, run_seconds, args.seed)):
            problem = check_moment(Path(root) / f"moment{index}", moment, reference)
            failures += problem is not None
            print(f"{index + 1:2d}/{args.moments} {'FAIL ' + problem if problem else 'ok   ' + moment.describe()}")
    print(f"{args.moments - failures}/{args.moments} moments resumed bit-identically ({run_seconds:.1f}s per run)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
