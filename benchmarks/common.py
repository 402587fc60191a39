"""What the throughput benchmarks share: running one system's measurement in a fresh, offline interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
# Nothing may be fetched from the hub; TRL and transformers would otherwise try for model cards and the like.
OFFLINE = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def measure_in_subprocess(module: str, call: str, *, threads: int, setup: str = "") -> Any:
    """Import ``benchmarks/<module>.py`` as ``b`` in a fresh interpreter with ``threads`` torch threads, run the
    ``setup`` statements, then print ``call`` (an expression on ``b``) as JSON; return that value. A failing
    child prints its traceback's tail to stderr and raises with its last line."""
    code = (
        f"import sys, json, torch; sys.path.insert(0, {HERE!r}); torch.set_num_threads({threads}); "
        f"import {module} as b; {setup}{'; ' if setup else ''}print(json.dumps({call}))"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **OFFLINE},
        cwd=REPO,
    )
    if completed.returncode != 0:
        lines = completed.stderr.strip().splitlines() or [f"exit code {completed.returncode}"]
        print("\n".join(lines[-15:]), file=sys.stderr)  # the traceback's tail; the summary keeps its last line
        raise RuntimeError(lines[-1])
    return json.loads(completed.stdout.strip().splitlines()[-1])
