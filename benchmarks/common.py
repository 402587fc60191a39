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


def machine_summary() -> str:
    """One line naming the machine the figures come from: CPU model, cores, AVX-512 (lscpu), memory, torch."""
    import platform

    import torch

    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        lscpu = ""
    fields = dict(line.split(":", 1) for line in lscpu.splitlines() if ":" in line)
    model = fields.get("Model name", platform.processor() or platform.machine()).strip()
    flags = fields.get("Flags", "").split()
    avx512 = sorted(flag.removeprefix("avx512").lstrip("_") for flag in flags if flag.startswith("avx512"))
    vector = f"AVX-512 ({' '.join(avx512)})" if avx512 else ("AVX2, no AVX-512" if "avx2" in flags else "no AVX2")
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"machine: {platform.machine()} {model}, {os.cpu_count()} cores, {vector}, {memory:.0f} GiB; "
        f"torch {torch.__version__}, {'CUDA' if torch.cuda.is_available() else 'CPU only'}"
    )
