"""Whether a run compiles its blocks: ``parallel.compile`` true / false, or ``auto`` (the default), decided by the
machine and the method, the choice printed once at start.

``auto`` compiles each repeated block (regional compile, as torchtitan does: one graph per block shape, compiled
once and reused by every layer) on CUDA, where it paid 1.2–1.3x on an H100 (``benchmarks/RESULTS.md``, gpu.py),
and never on CPU, where inductor's C++ build takes longer than a short run saves. It stays off where the method
would recompile every step: a decode loop in the training step (GRPO, RLOO, on-policy distillation: every new
length is a new shape) and packed preference pairs (a per-pair loop of changing lengths). Under ``auto`` a block
that fails to compile runs eagerly with dynamo's one warning (``suppress_errors``) instead of ending the run; an
explicit ``true`` fails loudly. Compiled kernels are cached by inductor (``TORCHINDUCTOR_CACHE_DIR``, by default
under the system's temporary folder), so a second run on the machine skips most of the compile time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CompileChoice:
    """The resolved ``parallel.compile``: whether blocks are compiled, and the header's line saying why."""

    enabled: bool
    line: str
    automatic: bool


def choose_compile(setting: bool | str, device: torch.device, blockers: Sequence[str] = ()) -> CompileChoice:
    """Resolve ``parallel.compile`` for a run on ``device``; ``blockers`` name what in the method makes compiling
    recompile every step (they turn ``auto`` off, never an explicit ``true``)."""
    if setting is True or setting is False:
        return CompileChoice(bool(setting), f"parallel.compile: {str(setting).lower()}", automatic=False)
    if device.type != "cuda":
        return CompileChoice(
            False, f"parallel.compile: auto -> off ({device.type}: compiling costs more than it saves)", True
        )
    if blockers:
        return CompileChoice(
            False, f"parallel.compile: auto -> off ({', '.join(blockers)} would recompile each step)", True
        )
    return CompileChoice(True, "parallel.compile: auto -> on (CUDA: each block compiled; false turns it off)", True)


def allow_eager_fallback() -> None:
    """Under ``auto``: a graph that fails to compile runs eagerly, with dynamo's warning, instead of ending the run."""
    import torch._dynamo

    torch._dynamo.config.suppress_errors = True
