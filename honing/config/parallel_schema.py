"""The ``parallel`` section: how several processes share the training, on one device mesh."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from honing.config.section import Section


class ParallelSection(Section):
    """How several processes share the training (``torchrun`` or ``honing train --nproc N``). One device mesh
    (``honing.parallel_dims``): dp_replicate × dp_shard × ep × cp × tp = the number of processes."""

    strategy: Literal["auto", "ddp", "fsdp", "none"] = "auto"
    """``ddp``, ``fsdp`` (FSDP2), ``none``, or ``auto``: fsdp with several processes."""
    dp_replicate: int = Field(default=1, ge=1)
    """Whole copies of the model (DDP; with ``dp_shard`` > 1, HSDP's replicas)."""
    dp_shard: int = Field(default=-1, ge=-1)
    """FSDP2 shards of the model; -1: whatever the other dimensions leave."""
    tp: int = Field(default=1, ge=1)
    """Tensor parallelism from the model family's own plan (transformers' ``base_model_tp_plan``)."""
    cp: int = Field(default=1, ge=1)
    """Sequence (context) parallelism: Ulysses all-to-all attention over this many ranks."""
    ep: int = Field(default=1, ge=1)
    """Expert parallelism: the experts of MoE models sharded over this many ranks."""
    reshard_after_forward: bool = True
    """FSDP2: free gathered weights after forward (less memory, more traffic)."""
    activation_checkpointing: Literal["auto", "none", "full", "every_n"] = "auto"
    """Recompute activations in backward: in no block, every block (``full``) or every N-th (``every_n``); ``auto``:
    on CUDA the least of these whose planned peak fits 90% of the GPU (``honing.plan.auto_checkpointing``), none on
    CPU; the choice is printed at start."""
    activation_checkpointing_every: int = Field(default=2, ge=1)
    """``every_n``: the N-th, 2N-th, ... block is checkpointed."""
    compile: bool | Literal["auto"] = "auto"
    """``torch.compile`` each block (regional compile); ``auto``: on CUDA unless the method decodes in its step or
    packs preference pairs (``honing.models.compile_choice``), off on CPU; the choice is printed at start."""
    mixed_precision: Literal["auto", "none", "bf16"] = "auto"
    """FSDP2's parameter dtype: bf16, none (the weights' own), or ``auto``: bf16 for bf16-mixed on CUDA."""
    timeout_seconds: float = Field(default=600, gt=0)
    """A collective waiting longer than this many seconds fails the run."""
    offload: Literal["none", "optimizer", "params"] = "none"
    """CUDA only: ``optimizer``: AdamW's states and update on the host (``honing.optim.host_offload``);
    ``params``: FSDP2's CPUOffloadPolicy, weights, gradients and optimizer on the host (pinned), gathered to the GPU
    per block."""
    activation_offload: bool = False
    """CUDA only: activations saved for backward wait in pinned host memory."""
