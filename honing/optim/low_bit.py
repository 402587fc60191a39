"""AdamW with 8-bit states (``optim.state_dtype: int8``): torchao's ``AdamW8bit``, whose two moments are held as
8-bit codes with one scale per block of 256 values (bitsandbytes' dynamic quantization map), a quarter of fp32
states. Tensors under 4,096 values (norms, biases, small adapters) keep plain states, as in bitsandbytes.

torchao rather than bitsandbytes: its states are torch tensor subclasses on any device, they shard with FSDP2's
DTensors and save through torch.distributed.checkpoint as they are (codes and scales, so a resume is exact).
Imported only by runs that ask for it (``honing.optim.builder``), after ``require_torchao``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torchao.optim import AdamW8bit

# From this many values in one tensor the update is compiled on CPU too: eagerly, torchao's update of a tensor holds
# about 24 bytes of fp32 and int64 temporaries per value (1.5 GB for a 65M-value embedding), which the fused
# kernel does not, and the compile time is small beside such a model's steps.
COMPILE_MIN_NUMEL = 1 << 22


class LowBitAdamW(AdamW8bit):
    """torchao's AdamW8bit with float learning rates (honing's schedule sets ``group["lr"]`` every step and
    checkpoints it; torchao reads a tensor) and, off CUDA, its per-parameter update run eagerly."""

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group, keeping its LR a float (torchao turns it into a tensor)."""
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        group["lr"] = float(group["lr"])

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """One AdamW step; each group's LR is the tensor torchao reads for its duration."""
        floats = [group["lr"] for group in self.param_groups]
        for group in self.param_groups:
            group["lr"] = torch.tensor(float(group["lr"]), dtype=torch.float32)
        try:
            params = [p for group in self.param_groups for p in group["params"]]
            if any(p.device.type == "cuda" for p in params) or max(p.numel() for p in params) >= COMPILE_MIN_NUMEL:
                return super().step(closure)
            # torchao compiles its update per parameter shape; inductor on CPU builds C++ for each (seconds to
            # tens of seconds a shape). For small tensors eager costs milliseconds and its fp32 temporaries are
            # small: the same maths without the compile
            with torch.compiler.set_stance("force_eager"):
                return super().step(closure)
        finally:
            for group, value in zip(self.param_groups, floats):
                group["lr"] = float(value)


def adamw_8bit(
    param_groups: list[dict[str, Any]],
    *,
    lr: float,
    betas: tuple[float, float],
    eps: float,
    bf16_stochastic_round: bool = False,
) -> LowBitAdamW:
    """AdamW with 8-bit states over ``param_groups`` (each carries its own weight decay)."""
    return LowBitAdamW(param_groups, lr=lr, betas=betas, eps=eps, bf16_stochastic_round=bf16_stochastic_round)
