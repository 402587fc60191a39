"""What a method's step asks of the ranks it runs on: how gradients are averaged, how many batches a step reads,
and sums and gathers over the ranks that hold different tokens."""

from __future__ import annotations

import torch

from honing.distributed import is_distributed
from honing.parallel_dims import ParallelDims


class StepRanks:
    """The rank arithmetic of a step over a run's ``ParallelDims`` (all of it the identity in one process)."""

    def __init__(self, parallel_dims: ParallelDims):
        self.dims = parallel_dims
        #: how many ranks DDP / FSDP2 average the gradients over (a loss scaled by it and divided by the step's
        #: global count gives the one-process update)
        self.grad_divisor = parallel_dims.grad_divisor
        #: how many different batches one step reads (the data loader's slices)
        self.dp_size = parallel_dims.dp_size

    def sum(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` summed over the ranks that hold different tokens (itself in one process): tensor-parallel
        ranks hold the same tokens, so each is counted once."""
        if not is_distributed():
            return value
        value = value.clone()
        torch.distributed.all_reduce(value, group=self.dims.group("dp_cp"))
        return value

    def count_once(self, value: torch.Tensor | int) -> torch.Tensor | int:
        """``value`` on one rank of each tensor-parallel group and zero on the others, so a ``ReduceType.sum``
        metric counts the group's shared tokens once."""
        return value if self.dims.local_rank("tp") == 0 else value * 0

    def gather_dp(self, values: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, slice]:
        """Every data-parallel rank's ``values`` (of one shape) in rank order, on the CPU, and this rank's rows in
        them (itself and every row in one process)."""
        start = self.dims.dp_rank * len(values)
        return gather(values, device, self.dims.group("dp")), slice(start, start + len(values))


def gather(values: torch.Tensor, device: torch.device, group: object = None) -> torch.Tensor:
    """Every rank's ``values`` (of the same shape) of ``group`` (None: every rank) concatenated in rank order, on
    the CPU; itself in one process. The collective runs on ``device`` (NCCL reduces only GPU tensors)."""
    if not is_distributed():
        return values.cpu()
    values = values.to(device).contiguous()
    parts = [torch.empty_like(values) for _ in range(torch.distributed.get_world_size(group))]
    torch.distributed.all_gather(parts, values, group=group)
    return torch.cat(parts).cpu()
