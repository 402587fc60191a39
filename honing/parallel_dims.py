"""The run's parallel layout: named dimensions of one device mesh, validated against the world size.

In the spirit of torchtitan's ``ParallelDims``. Five dimensions, outermost first (the innermost changes fastest
from one rank to the next, so its collectives stay inside a node):

- ``dp_replicate``: whole copies of the model (DDP, or HSDP's replica groups);
- ``dp_shard``: FSDP2 shards (``-1``: whatever the others leave of the world);
- ``ep``: experts sharded over ranks; the rest of the model is data-parallel over these ranks;
- ``cp``: every row's tokens split over ranks (Ulysses sequence parallelism);
- ``tp``: each weight matrix split over ranks (the model family's tensor-parallel plan).

Their product is the world size. Ranks that differ only in ``cp`` or ``tp`` read the same batch; the data loader
slices over the ``dp`` ranks (``dp_replicate × dp_shard × ep``). Gradients of the dense weights are averaged over
``dp_replicate × dp_shard × ep × cp`` ranks (``grad_divisor``); tensor-parallel ranks hold parts of one gradient.

Every consumer (the loader's slices, metric reduction, loss normalisation, GRPO's sampling, checkpoints) asks this
object for its own dimension instead of the global world.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from honing.errors import ConfigError

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup
    from torch.distributed.device_mesh import DeviceMesh

DIMENSIONS = ("dp_replicate", "dp_shard", "ep", "cp", "tp")


@dataclass
class ParallelDims:
    """Sizes of the mesh's dimensions for ``world_size`` processes, and the mesh built from them."""

    dp_replicate: int = 1
    dp_shard: int = -1
    ep: int = 1
    cp: int = 1
    tp: int = 1
    world_size: int = 1
    _mesh: DeviceMesh | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in DIMENSIONS:
            value = getattr(self, name)
            if value < 1 and not (name == "dp_shard" and value == -1):
                raise ConfigError(f"parallel.{name}: expected an integer >= 1, got {value}")
        others = self.dp_replicate * self.ep * self.cp * self.tp
        if self.dp_shard == -1:
            if self.world_size % others:
                raise ConfigError(
                    f"parallel: dp_replicate × ep × cp × tp = {self._sizes('dp_shard')} = {others} does not divide "
                    f"the world size ({self.world_size} processes), so dp_shard: -1 (the rest) has no whole value"
                )
            self.dp_shard = self.world_size // others
        if others * self.dp_shard != self.world_size:
            raise ConfigError(
                f"parallel: dp_replicate × dp_shard × ep × cp × tp = {self._sizes()} = {others * self.dp_shard} "
                f"must equal the world size ({self.world_size} processes)"
            )

    def _sizes(self, *leave_out: str) -> str:
        return " × ".join(f"{name}={getattr(self, name)}" for name in DIMENSIONS if name not in leave_out)

    # --- sizes ------------------------------------------------------------------------
    @property
    def dp_size(self) -> int:
        """How many different batches a step reads: the data loader's number of slices."""
        return self.dp_replicate * self.dp_shard * self.ep

    @property
    def fsdp_size(self) -> int:
        """The ranks a dense weight is sharded over by FSDP2 (``dp_shard × ep × cp``)."""
        return self.dp_shard * self.ep * self.cp

    @property
    def grad_divisor(self) -> int:
        """The ranks over which DDP / FSDP2 average dense gradients: every rank that sees other tokens."""
        return self.dp_replicate * self.fsdp_size

    @property
    def cp_enabled(self) -> bool:
        """True when rows are split over sequence-parallel ranks."""
        return self.cp > 1

    def describe(self) -> str:
        """``dp_replicate=1 × dp_shard=2 × tp=2`` with the dimensions above 1 (``1 process`` alone)."""
        parts = [f"{name}={getattr(self, name)}" for name in DIMENSIONS if getattr(self, name) > 1]
        return " × ".join(parts) if parts else "1 process"

    # --- the mesh ---------------------------------------------------------------------
    def build_mesh(self, device_type: str) -> DeviceMesh | None:
        """The device mesh with the five named dimensions and the flattened ones its consumers use
        (``dp``, ``fsdp``, ``efsdp``, ``dp_cp``); built once, under a process group (None without one)."""
        import torch.distributed as dist

        if self._mesh is not None or not (dist.is_available() and dist.is_initialized()):
            return self._mesh
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(
            device_type, tuple(getattr(self, name) for name in DIMENSIONS), mesh_dim_names=DIMENSIONS
        )
        mesh[("dp_replicate", "dp_shard", "ep")]._flatten("dp")
        mesh[("dp_shard", "ep", "cp")]._flatten("fsdp")
        # every rank that holds other tokens: where a step's target count is summed
        mesh[("dp_replicate", "dp_shard", "ep", "cp")]._flatten("dp_cp")
        # experts are sharded over ep; FSDP2 shards each expert's weights over the ranks left
        mesh[("dp_shard", "cp")]._flatten("efsdp")
        self._mesh = mesh
        return mesh

    @property
    def mesh(self) -> DeviceMesh | None:
        """The device mesh (None with one process, or before :meth:`build_mesh`)."""
        return self._mesh

    def submesh(self, *names: str) -> DeviceMesh:
        """The sub-mesh of the named (possibly flattened) dimensions."""
        if self._mesh is None:
            raise RuntimeError("ParallelDims.build_mesh() must run before a sub-mesh is asked for")
        return self._mesh[names if len(names) > 1 else names[0]]

    def local_rank(self, name: str) -> int:
        """This process's index along dimension ``name`` (0 with one process)."""
        if self._mesh is None:
            return 0
        return self._mesh[name].get_local_rank()

    def group(self, name: str) -> ProcessGroup | None:
        """The process group of dimension ``name`` (None with one process)."""
        if self._mesh is None:
            return None
        return self._mesh[name].get_group()

    @property
    def dp_rank(self) -> int:
        """Which of the ``dp_size`` batch slices this rank reads."""
        return self.local_rank("dp")


class DimensionSizes(Protocol):
    """The five dimensions' sizes, as the config's ``parallel`` section holds them."""

    dp_replicate: int
    dp_shard: int
    ep: int
    cp: int
    tp: int


def parallel_dims_from(parallel: DimensionSizes, world_size: int) -> ParallelDims:
    """``ParallelDims`` from the config's ``parallel`` section (any object with the five attributes)."""
    return ParallelDims(**{name: getattr(parallel, name) for name in DIMENSIONS}, world_size=world_size)


def check_divides(what: str, size: int, dimension: str, value: int) -> None:
    """Refuse ``dimension`` = ``value`` when it does not divide ``size`` (e.g. the attention heads)."""
    if value > 1 and size % value:
        raise ConfigError(f"parallel.{dimension}={value} must divide {what} ({size})")
