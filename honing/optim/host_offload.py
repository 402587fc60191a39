"""AdamW with its states and update in host memory (``parallel.offload: optimizer``): the GPU keeps the weights and
gradients; AdamW's two moments (a model's largest part with fp32 weights: 8 bytes a parameter) stay in pinned host
memory and the update runs on the host's CPU with torch's fused CPU AdamW kernel.

Why not torchao's ``CPUOffloadOptimizer``: it copies each gradient to the host from a backward hook, before honing
clips the gradients, keeps one optimizer per tensor (its state dict is not AdamW's), and refuses FSDP2. Here the
step starts after clipping, the state is torch's AdamW's (``step``, ``exp_avg``, ``exp_avg_sq`` under the model's
own parameters, so a checkpoint loads into either optimizer), and FSDP2 shards stay shards: each rank updates its
local shard and saves its states as DTensors with host-local tensors, as FSDP2's ``CPUOffloadPolicy`` does.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch.distributed.tensor import DTensor
from torch.optim.adamw import adamw

if TYPE_CHECKING:
    from torch.optim.optimizer import ParamsT

# what torch's AdamW writes in each group beside the hyperparameters (all off: the plain update)
ADAMW_FLAGS = {
    "amsgrad": False,
    "maximize": False,
    "foreach": None,
    "capturable": False,
    "differentiable": False,
    "decoupled_weight_decay": True,
}
UPDATE_FLAGS = ("amsgrad", "maximize", "decoupled_weight_decay")  # the others choose kernels, not the maths


def local(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor's local shard (a DTensor's) or the tensor itself."""
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def host_shard(p: torch.Tensor) -> torch.Tensor:
    """Zeros in host memory shaped as ``p``'s local shard, pinned when a GPU is there to copy to and from."""
    shard = local(p)
    return torch.zeros(shard.shape, dtype=shard.dtype, pin_memory=torch.cuda.is_available())


class HostOffloadAdamW(torch.optim.Optimizer):
    """AdamW whose moments live in host memory and whose update runs there: a step copies each gradient (after
    clipping) and weight to reused host buffers, updates the host weight and copies it back to the device."""

    def __init__(
        self,
        params: ParamsT,
        *,
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        fused: bool | None = None,
    ) -> None:
        # torch's AdamW's group keys, so that the state dicts of the two are interchangeable; ``fused``: torch's fused
        # CPU kernel unless asked not to (then its for-loop)
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay, "fused": fused is not False}
        defaults.update(ADAMW_FLAGS)
        super().__init__(params, defaults)
        # reused host buffers for each parameter's weight and gradient: allocating pinned memory every step is slow
        self._weights: dict[torch.Tensor, torch.Tensor] = {}
        self._grads: dict[torch.Tensor, torch.Tensor] = {}

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """One AdamW update of every parameter with a gradient, computed on the host."""
        loss = torch.enable_grad()(closure)() if closure is not None else None
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            weights, grads, exp_avgs, exp_avg_sqs, steps = [], [], [], [], []
            for p in params:
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0, dtype=torch.float32)
                    state["exp_avg"] = self._host_like(p)
                    state["exp_avg_sq"] = self._host_like(p)
                # the weight is copied in every step, not kept on the host between steps: whatever changed the
                # device's weight since (a checkpoint load, a user's callback) is what gets updated
                weights.append(self._buffer(self._weights, p).copy_(local(p), non_blocking=True))
                grads.append(self._buffer(self._grads, p).copy_(local(p.grad), non_blocking=True))
                exp_avgs.append(local(state["exp_avg"]))
                exp_avg_sqs.append(local(state["exp_avg_sq"]))
                steps.append(state["step"])
            if any(p.device.type == "cuda" for p in params):
                torch.cuda.synchronize()  # the non-blocking copies to pinned memory have landed
            beta1, beta2 = group["betas"]
            adamw(
                weights,
                grads,
                exp_avgs,
                exp_avg_sqs,
                [],
                steps,
                fused=group["fused"] is not False,
                foreach=False,
                amsgrad=False,
                beta1=beta1,
                beta2=beta2,
                lr=float(group["lr"]),
                weight_decay=group["weight_decay"],
                eps=group["eps"],
                maximize=False,
            )
            for p, weight in zip(params, weights):
                local(p).copy_(weight, non_blocking=True)
        return loss

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load an AdamW state dict (this optimizer's or torch's AdamW's), keeping every moment in host memory:
        torch's loading would move each to its parameter's device, the GPU memory this optimizer exists to save."""
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups) or any(
            len(saved["params"]) != len(group["params"]) for saved, group in zip(saved_groups, self.param_groups)
        ):
            raise ValueError(
                "the optimizer state dict has other parameter groups than this optimizer (group sizes "
                f"{[len(g['params']) for g in saved_groups]} vs {[len(g['params']) for g in self.param_groups]})"
            )
        for saved in saved_groups:
            other = {key: saved[key] for key in UPDATE_FLAGS if saved.get(key, ADAMW_FLAGS[key]) != ADAMW_FLAGS[key]}
            if other:
                raise ValueError(f"the optimizer state dict is of another update ({other}); this one is plain AdamW")
        by_id: dict[Any, torch.Tensor] = {}
        for saved, group in zip(saved_groups, self.param_groups):
            by_id.update(zip(saved["params"], group["params"]))
            group.update({key: value for key, value in saved.items() if key != "params"})
        self.state = defaultdict(dict)
        for key, values in state_dict["state"].items():
            p = by_id[key]
            state = {}
            for name, value in values.items():
                if name == "step":
                    state[name] = torch.tensor(float(value), dtype=torch.float32)
                else:
                    state[name] = self._host_like(p)
                    local(state[name]).copy_(local(value))
            self.state[p] = state

    def _host_like(self, p: torch.Tensor) -> torch.Tensor:
        """Zeros in host memory shaped as ``p``'s local shard (pinned when a GPU is there to copy to), a DTensor
        placed as ``p`` when ``p`` is one, so that a checkpoint saves each rank's shard of the state."""
        host = host_shard(p)
        if isinstance(p, DTensor):
            return DTensor.from_local(
                host, p.device_mesh, p.placements, run_check=False, shape=p.shape, stride=p.stride()
            )
        return host

    @staticmethod
    def _buffer(buffers: dict[torch.Tensor, torch.Tensor], p: torch.Tensor) -> torch.Tensor:
        """``p``'s reused host buffer in ``buffers``, made on first use."""
        if p not in buffers:
            buffers[p] = host_shard(p)
        return buffers[p]
