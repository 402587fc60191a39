"""A device's peak FLOP/s for a training precision: datasheet numbers for GPUs, a cached probe on CPU."""

from __future__ import annotations

import json
import logging
import os
import platform
import time

import torch

from honing.train.cpu_load import CpuLoad, current_load

log = logging.getLogger(__name__)

# Dense (no structured sparsity) FLOP/s per GPU, matched against torch.cuda.get_device_name() in
# lower case; the first row whose every pattern is in the name wins, so specific names come first
# ("l40s" before "l4", "h100 nvl" before "h100"). Columns: 16-bit tensor cores, fp32 without tensor
# cores. Sources are the vendor datasheets (NVIDIA quotes "with sparsity" figures: halved here):
#   A100 https://www.nvidia.com/en-us/data-center/a100/ ; H100 / H200 .../data-center/h100/, /h200/ ;
#   B200 https://resources.nvidia.com/en-us-blackwell-architecture (HGX B200, per GPU; its fp32
#     figure is the least certain here: early spec sheets vary) ;
#   L4 / L40S .../data-center/l4/, /l40s/ ; V100 .../data-center/v100/ ; T4 .../data-center/tesla-t4/ ;
#   RTX 4090: Ada Lovelace architecture whitepaper, appendix A (bf16 with fp32 accumulate) ;
#   RTX 3090: Ampere GA102 whitepaper, appendix A (bf16 with fp32 accumulate) ;
#   A10G: AWS publishes no datasheet; figures as measured/reported for g5 instances (it is not an A10).
# V100 and T4 have no bf16 tensor cores: their 16-bit column is fp16, the best the chip can do.
GPU_PEAK_FLOPS: tuple[tuple[tuple[str, ...], float, float], ...] = (
    (("b200",), 2250e12, 80e12),
    (("h200", "nvl"), 836e12, 60e12),
    (("h200",), 989e12, 67e12),
    (("h100", "nvl"), 835e12, 60e12),
    (("h100", "pcie"), 756e12, 51e12),
    (("h100",), 989e12, 67e12),  # SXM, named "H100 80GB HBM3"
    (("a100",), 312e12, 19.5e12),
    (("a10g",), 70e12, 31.5e12),
    (("l40s",), 362e12, 91.6e12),
    (("l4",), 121e12, 30.3e12),
    (("4090",), 165.2e12, 82.6e12),
    (("3090",), 71e12, 35.6e12),
    (("v100", "pcie"), 112e12, 14e12),
    (("v100",), 125e12, 15.7e12),
    (("t4",), 65e12, 8.1e12),
)

PROBE_SIZE = 1024
PROBE_SECONDS = 0.4


def precision_dtype(precision: str) -> torch.dtype:
    """The matmul dtype a training precision runs at: bf16 for ``bf16`` and ``bf16-mixed``, else fp32."""
    if precision in ("bf16", "bf16-mixed", "fp8"):  # fp8's MFU against the bf16 peak, as torchtitan reports it
        return torch.bfloat16
    if precision in ("fp16", "fp16-mixed"):
        return torch.float16
    if precision == "fp32":
        return torch.float32
    raise ValueError(f"unknown precision {precision!r}: expected 'fp32', 'bf16' or 'bf16-mixed'")


def gpu_peak_flops(device_name: str, precision: str) -> float | None:
    """The datasheet peak for a GPU named ``device_name``, or None for a GPU not in the table."""
    name = device_name.lower()
    half = precision_dtype(precision) != torch.float32
    for patterns, half_flops, fp32_flops in GPU_PEAK_FLOPS:
        if all(pattern in name for pattern in patterns):
            return half_flops if half else fp32_flops
    return None


def cpu_model_name() -> str:
    """The CPU's model name from /proc/cpuinfo (or what ``platform`` knows elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"


def peak_flops_cache_path() -> str:
    """``$HONING_CACHE_DIR/peak_flops.json``, or under ``~/.cache/honing`` when that is unset."""
    folder = os.environ.get("HONING_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "honing")
    return os.path.join(folder, "peak_flops.json")


def measure_matmul_flops(dtype: torch.dtype, *, size: int = PROBE_SIZE, seconds: float = PROBE_SECONDS) -> float:
    """FLOP/s of square ``size`` matmuls in ``dtype`` on the CPU, with torch's current thread count."""
    # a generator of its own: drawing from the global one would shift the run's dropout masks and sampling on the
    # first run on a machine (the one that measures), and only then, so a rerun would not repeat it
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=generator).to(dtype)
    b = torch.randn(size, size, generator=generator).to(dtype)
    out = torch.empty(size, size, dtype=dtype)
    with torch.no_grad():
        torch.mm(a, b, out=out)  # warm-up: thread pool start and kernel selection are not the rate
        count = 0
        start = time.perf_counter()
        while True:
            torch.mm(a, b, out=out)
            count += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                return 2 * size**3 * count / elapsed


def cpu_matmul_flops(dtype: torch.dtype) -> float:
    """The probed matmul FLOP/s of this CPU, thread count and dtype; measured once, then read from a cache.

    This is the achievable dense matmul rate, not the chip's theoretical peak (which no table
    holds for the many CPU models, and which vector units rarely reach), so an MFU against it
    reads as "fraction of what this machine's matmuls can do".
    """
    return probe_cpu_matmul(dtype)[0]


def probe_cpu_matmul(dtype: torch.dtype) -> tuple[float, CpuLoad | None]:
    """``cpu_matmul_flops`` and the load it was measured under now: None when read from the cache, which only
    holds rates measured while other processes left the probe's threads their cores (a probe that shared them
    measures the sharing: issue 45's cached peak under which a run reported MFU > 1)."""
    threads = torch.get_num_threads()
    key = f"{cpu_model_name()} | threads={threads} | {str(dtype).removeprefix('torch.')}"
    path = peak_flops_cache_path()
    cache = _read_cache(path)
    entry = cache.get(key)
    # a bare number is an entry written before the load was checked: it may be a busy machine's, so measure again
    if isinstance(entry, dict) and isinstance(entry.get("flops"), (int, float)):
        return float(entry["flops"]), None
    load = current_load()
    flops = measure_matmul_flops(dtype)
    if load.leaves_free(threads):
        log.info("measured this CPU's %s matmul rate for MFU: %.3g FLOP/s (cached in %s)", dtype, flops, path)
        cache[key] = {"flops": flops, "other_load": round(load.other_load, 2)}
        _write_cache(path, cache)
    return flops, load


def peak_flops(device: torch.device | str, precision: str) -> float | None:
    """Peak FLOP/s of ``device`` at ``precision``: the datasheet number for a known GPU, the probed
    achievable matmul rate on CPU (see ``cpu_matmul_flops``), None for an unknown GPU or other device, and None
    on a CPU too busy to measure it (one info line: no MFU this run)."""
    device = torch.device(device)
    if device.type == "cuda":
        return gpu_peak_flops(torch.cuda.get_device_name(device), precision)
    if device.type != "cpu":
        return None
    flops, load = probe_cpu_matmul(precision_dtype(precision))
    threads = torch.get_num_threads()
    if load is not None and not load.leaves_free(threads):
        log.info(
            "throughput/mfu not recorded: this CPU's matmul peak cannot be measured while other processes keep it "
            "busy (%s, %d thread(s) here); a quieter start measures it, or set callbacks.speed_monitor.peak_flops",
            load.describe(),
            threads,
        )
        return None
    return flops


def _read_cache(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            cache = json.load(handle)
        return cache if isinstance(cache, dict) else {}
    except (OSError, ValueError):
        return {}  # missing or damaged: measure again and rewrite it


def _write_cache(path: str, cache: dict) -> None:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"  # several ranks may probe at once; each replaces atomically
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(cache, handle, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError as error:
        log.warning("could not cache the measured FLOP/s in %s (%s); the next run will measure again", path, error)
