"""fp16 mixed precision's dynamic loss scale (``trainer.precision: fp16-mixed``).

float16 holds magnitudes from about 6e-8 to 65504: a step's gradients, often 1e-6 to 1e-9 of the fp16 activations
they pass through, flush to zero. So backward runs on the loss times a large scale (2^16 to start), the gradients
are divided by it before clipping (``optim/grad_norm`` is the true norm) and the optimizer step; a step whose
gradients overflowed (inf or NaN) is skipped, weights and optimizer state untouched, and the scale halved; after
2000 clean steps in a row it doubles. This is torch's ``GradScaler`` with its defaults, as transformers' Trainer
(through accelerate) uses it. As there, a skipped step does not advance the LR schedule: ``skipped_steps`` counts
them, and the schedule runs that many steps behind the trainer's step.
"""

from __future__ import annotations

from typing import Any

import torch

from honing.distributed import is_distributed

#: torch's (and transformers') first scale: 2^16
INIT_SCALE = 2.0**16
#: clean steps in a row before the scale doubles (torch's default)
GROWTH_INTERVAL = 2000


class LossScaler:
    """A dynamic loss scale over torch's ``GradScaler``; in several processes the ranks agree on an overflow, so
    that FSDP2's and tensor parallelism's shards (whose gradients differ) all skip the same step."""

    def __init__(self, device: torch.device, *, init_scale: float = INIT_SCALE, growth_interval: int = GROWTH_INTERVAL):
        self.device = torch.device(device)
        self.scaler = torch.amp.GradScaler(self.device.type, init_scale=init_scale, growth_interval=growth_interval)
        self.skipped_steps = 0  # optimizer steps skipped for an overflow over the run: the LR schedule's lag

    def scaled(self, value: torch.Tensor | float) -> torch.Tensor:
        """``value`` times the loss scale, on the device (what backward is called with); no host sync."""
        return self.scaler.scale(torch.as_tensor(value, dtype=torch.float32, device=self.device))

    def scale(self) -> torch.Tensor:
        """The current loss scale, as a tensor on the device (a metric, without waiting for it)."""
        return self.scaled(1.0)

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide the optimizer's gradients by the scale, noting whether any is inf or NaN (before clipping), on
        any rank."""
        self.scaler.unscale_(optimizer)
        if is_distributed():
            # Not torch's ShardedGradScaler: its (1,)-shaped flag breaks the fused AdamW's step (torch 2.14). The
            # flags GradScaler's step and update read are summed over ranks in place instead.
            for found_inf in self.scaler._found_inf_per_device(optimizer).values():
                torch.distributed.all_reduce(found_inf)

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """Step ``optimizer`` unless the unscaled gradients overflowed, then update the scale (halved after an
        overflow, doubled after ``growth_interval`` clean steps); True when the optimizer stepped."""
        # Read here (one host sync, as GradScaler's own step does) rather than left to a fused optimizer's flag,
        # which FSDP2's sharded parameters do not honour: a skipped step never reaches the optimizer.
        overflowed = any(bool(flag.item()) for flag in self.scaler._found_inf_per_device(optimizer).values())
        if not overflowed:
            self.scaler.step(optimizer)
        self.scaler.update()
        if overflowed:
            self.skipped_steps += 1
        return not overflowed

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The scale, the clean steps since it last changed, and the skipped steps: tensors, for the checkpoint."""
        state = self.scaler.state_dict()
        return {
            "scale": torch.tensor(float(state["scale"]), dtype=torch.float64),
            "growth_tracker": torch.tensor(int(state["_growth_tracker"]), dtype=torch.int64),
            "skipped_steps": torch.tensor(self.skipped_steps, dtype=torch.int64),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""
        current = self.scaler.state_dict()
        current["scale"] = float(state["scale"])
        current["_growth_tracker"] = int(state["growth_tracker"])
        self.scaler.load_state_dict(current)
        self.skipped_steps = int(state["skipped_steps"])
