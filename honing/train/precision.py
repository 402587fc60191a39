"""What the training device can do, and the precision a run should use on it.

On a CPU without native bf16 instructions (AVX-512 BF16 or AMX), torch emulates bf16 matmuls: measured on
such a machine, a 2048² bf16 matmul ran at ~1 GFLOP/s against ~171 GFLOP/s in fp32, and ``bf16-mixed``
made every step 6–19× slower. A run asking for bf16 there is warned with the measured factor, or falls
back to fp32, by ``trainer.emulated_bf16``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch

from honing.train.peak_flops import cpu_matmul_flops, cpu_model_name

log = logging.getLogger(__name__)

BF16_PRECISIONS = ("bf16", "bf16-mixed", "fp8")
#: the mixed precisions: weights and optimizer in fp32, the forward autocast to this dtype (``fp8``: what its float8
#: linear layers leave in bf16)
AUTOCAST_DTYPES = {"bf16-mixed": torch.bfloat16, "fp16-mixed": torch.float16, "fp8": torch.bfloat16}
#: the precision whose gradients need a loss scale (float16's range ends at 65504 and 6e-8)
LOSS_SCALED_PRECISION = "fp16-mixed"


def autocast(precision: str, device_type: str) -> contextlib.AbstractContextManager:
    """Autocast to the mixed precision's dtype (``bf16-mixed``, ``fp16-mixed``); a no-op for the others."""
    dtype = AUTOCAST_DTYPES.get(precision)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=dtype)


def cpu_has_native_bf16() -> bool:
    """True when this CPU runs bf16 matmuls in hardware (AVX-512 BF16 or AMX tiles)."""
    checks = (getattr(torch.cpu, "_is_avx512_bf16_supported", None), getattr(torch.cpu, "_is_amx_tile_supported", None))
    return any(check is not None and bool(check()) for check in checks)


def emulates_bf16(
    device: torch.device, precision: str, *, native_bf16: Callable[[], bool] = cpu_has_native_bf16
) -> bool:
    """True when ``precision`` computes in bf16 on a CPU without bf16 instructions (torch emulates it)."""
    return precision in BF16_PRECISIONS and torch.device(device).type == "cpu" and not native_bf16()


def describe_device(device: torch.device, *, native_bf16: Callable[[], bool] = cpu_has_native_bf16) -> str:
    """One line for the run's header: the device, and on CPU its vector unit, threads and bf16 support."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        name = torch.cuda.get_device_name(index)
        bf16 = "bf16" if torch.cuda.is_bf16_supported() else "no bf16"
        return f"{device} ({name}, {bf16})"
    if device.type == "cpu":
        bf16 = "native bf16" if native_bf16() else "bf16 emulated"
        capability = torch.backends.cpu.get_cpu_capability()
        return f"cpu ({cpu_model_name()}, {capability}, {torch.get_num_threads()} threads, {bf16})"
    return str(device)


@dataclass(frozen=True)
class PrecisionChoice:
    """The precision a run trains at, and the warning to give (once) about the choice, if any."""

    precision: str
    warning: str | None = None


def choose_precision(
    requested: str,
    device: torch.device,
    *,
    policy: str = "warn",
    native_bf16: Callable[[], bool] = cpu_has_native_bf16,
    slowdown: Callable[[], float] | None = None,
) -> PrecisionChoice:
    """``requested`` unless it is bf16 on a CPU that emulates bf16: then warn with the measured slowdown
    (``policy="warn"``) or fall back to fp32 (``policy="fp32"``). ``slowdown()`` measures how many times
    slower a bf16 matmul is than an fp32 one here (a cached probe by default)."""
    if not emulates_bf16(device, requested, native_bf16=native_bf16):
        return PrecisionChoice(requested)
    factor = (slowdown or bf16_slowdown)()
    measured = f"bf16 matmuls measured {factor:.0f}x slower than fp32 here"
    if policy == "fp32":
        return PrecisionChoice(
            "fp32",
            f"trainer.precision {requested!r}: this CPU has no native bf16 ({measured}); training in fp32 "
            "instead (trainer.emulated_bf16=warn keeps bf16)",
        )
    return PrecisionChoice(
        requested,
        f"trainer.precision {requested!r}: this CPU has no native bf16 ({measured}), so training will be much "
        "slower than fp32; set trainer.precision=fp32, or trainer.emulated_bf16=fp32 to fall back automatically",
    )


def bf16_slowdown() -> float:
    """How many times slower a bf16 matmul runs than an fp32 one on this CPU (probed once, then cached)."""
    return cpu_matmul_flops(torch.float32) / max(cpu_matmul_flops(torch.bfloat16), 1.0)
