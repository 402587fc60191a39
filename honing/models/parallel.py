"""Parallelism applied to a model from outside: tensor / expert / sequence parallelism, then DDP or FSDP2 over the
data-parallel dimensions of the run's mesh, activation checkpointing, per-block torch.compile, and the helpers that
differ by strategy (gradient sync, gradient norms, full weights)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch
import torch.utils.checkpoint
from torch import nn

from honing.errors import ConfigError
from honing.models.model_parallel import apply_tensor_and_expert_parallel, expert_modules
from honing.models.offload import check_offload, offload_block_activations, offload_policy
from honing.models.wrappers import transformers_model
from honing.parallel_dims import ParallelDims

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, OffloadPolicy

    from honing.config.parallel_schema import ParallelSection

log = logging.getLogger(__name__)

STRATEGIES = ("auto", "ddp", "fsdp", "none")
ACTIVATION_CHECKPOINTING = ("none", "full", "every_n")
MIXED_PRECISION = ("auto", "none", "bf16")


def resolve_strategy(strategy: str, world_size: int) -> str:
    """``auto`` becomes ``fsdp`` with several processes and ``none`` with one; ``ddp`` and ``fsdp``
    on a single process become ``none`` (there is nothing to replicate or shard)."""
    if strategy not in STRATEGIES:
        raise ConfigError(f"parallel.strategy: expected one of {', '.join(STRATEGIES)}, got {strategy!r}")
    if world_size <= 1:
        return "none"
    if strategy == "none":
        raise ConfigError(
            f"parallel.strategy: 'none' with {world_size} processes would train {world_size} "
            f"separate models on different data; expected auto, ddp or fsdp"
        )
    return "fsdp" if strategy == "auto" else strategy


def fsdp_shards(strategy: str, dims: ParallelDims) -> int:
    """The ranks FSDP2 splits each weight over for ``parallel.strategy`` (1 when the run does not use FSDP2)."""
    return dims.fsdp_size if resolve_strategy(strategy, dims.world_size) == "fsdp" else 1


def find_blocks(model: nn.Module) -> list[nn.ModuleList]:
    """The lists of repeated blocks (e.g. ``model.model.layers``, also inside a peft wrapper): every
    ``nn.ModuleList`` of same-class modules that hold parameters, outermost lists only."""
    found: list[tuple[str, nn.ModuleList]] = []
    for name, module in model.named_modules():
        if not isinstance(module, nn.ModuleList) or len(module) == 0:
            continue
        if any(name.startswith(f"{outer}.") for outer, _ in found):
            continue  # e.g. the experts inside a decoder layer: sharded with their layer
        kinds = {type(child) for child in module}
        if len(kinds) == 1 and any(True for _ in module.parameters()):
            found.append((name, module))
    return [blocks for _, blocks in found]


def checkpoint_block(block: nn.Module) -> None:
    """Recompute ``block``'s activations in backward instead of keeping them.

    The block's ``forward`` is replaced on the instance rather than the block wrapped, so parameter
    names (and so checkpoints and exports) do not change.
    """
    forward = block.forward

    def checkpointed_forward(*args: object, **kwargs: object) -> object:
        if not (block.training and torch.is_grad_enabled()):
            return forward(*args, **kwargs)  # evaluation and generation keep nothing for backward anyway
        return torch.utils.checkpoint.checkpoint(forward, *args, use_reentrant=False, **kwargs)

    block.forward = checkpointed_forward


def apply_activation_checkpointing(blocks: list[nn.ModuleList], mode: str, every: int = 2) -> int:
    """Checkpoint every block (``full``) or every ``every``-th one (``every_n``: the every-th,
    2·every-th, ...); returns how many blocks were checkpointed."""
    if mode not in ACTIVATION_CHECKPOINTING:
        raise ConfigError(
            f"parallel.activation_checkpointing: expected one of {', '.join(ACTIVATION_CHECKPOINTING)}, got {mode!r}"
        )
    if mode == "none":
        return 0
    if every < 1:
        raise ConfigError(f"parallel.activation_checkpointing_every: expected an integer >= 1, got {every}")
    count = 0
    for module_list in blocks:
        for index, block in enumerate(module_list):
            if mode == "full" or (index + 1) % every == 0:
                checkpoint_block(block)
                count += 1
    return count


def mixed_precision_policy(mixed_precision: str, *, precision: str, device: torch.device) -> MixedPrecisionPolicy:
    """FSDP2's policy: bf16 parameters with fp32 gradient reduction for ``bf16-mixed`` on CUDA
    (``auto``) or when asked (``bf16``, refused under ``fp16-mixed``); fp32 throughout otherwise."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if mixed_precision not in MIXED_PRECISION:
        raise ConfigError(
            f"parallel.mixed_precision: expected one of {', '.join(MIXED_PRECISION)}, got {mixed_precision!r}"
        )
    if mixed_precision == "bf16" and precision == "fp16-mixed":
        raise ConfigError(
            "parallel.mixed_precision: 'bf16' holds bf16 weight copies, but trainer.precision 'fp16-mixed' computes "
            "in float16; use auto (fp32 weights, cast by autocast) or none"
        )
    bf16 = mixed_precision == "bf16" or (
        mixed_precision == "auto" and precision in ("bf16-mixed", "fp8") and device.type == "cuda"
    )
    if bf16:
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


def parallelize_from(
    model: nn.Module,
    parallel: ParallelSection,
    *,
    dims: ParallelDims,
    device: torch.device,
    precision: str,
    frozen: bool = False,
    compile_blocks: bool | None = None,
    checkpointing: tuple[str, int] | None = None,
) -> nn.Module:
    """``parallelize`` as the run's ``parallel`` section says; ``frozen``: a frozen copy (DPO's reference) sharded
    like the policy under FSDP2, with no activation checkpointing, compile or offload (it takes no gradients);
    ``compile_blocks``: ``parallel.compile`` resolved (``honing.models.compile_choice``), else an explicit true;
    ``checkpointing``: ``(mode, every)`` of ``parallel.activation_checkpointing`` resolved
    (``honing.plan.auto_checkpointing``), else as set (``auto``: none)."""
    if frozen:
        return parallelize(
            model,
            strategy="fsdp",
            dims=dims,
            device=device,
            reshard_after_forward=parallel.reshard_after_forward,
            mixed_precision=parallel.mixed_precision,
            precision=precision,
        )
    mode, every = checkpointing or (parallel.activation_checkpointing, parallel.activation_checkpointing_every)
    if mode == "auto":
        mode = "none"
    return parallelize(
        model,
        strategy=parallel.strategy,
        dims=dims,
        device=device,
        reshard_after_forward=parallel.reshard_after_forward,
        activation_checkpointing=mode,
        activation_checkpointing_every=every,
        compile=parallel.compile is True if compile_blocks is None else compile_blocks,
        mixed_precision=parallel.mixed_precision,
        precision=precision,
        offload=parallel.offload,
        activation_offload=parallel.activation_offload,
    )


def parallelize(
    model: nn.Module,
    *,
    strategy: str,
    dims: ParallelDims,
    device: torch.device,
    reshard_after_forward: bool = True,
    activation_checkpointing: str = "none",
    activation_checkpointing_every: int = 2,
    compile: bool = False,
    mixed_precision: str = "auto",
    precision: str = "fp32",
    offload: str = "none",
    activation_offload: bool = False,
) -> nn.Module:
    """Apply tensor / expert parallelism, sequence parallelism's attention, activation checkpointing, per-block
    compile, then DDP or FSDP2 over the data-parallel dimensions (torchtitan's order) and return the model to
    train: the same object for FSDP2 and ``none``, a DDP wrapper for ``ddp``."""
    strategy = resolve_strategy(strategy, dims.world_size)
    check_offload(offload, activation_offload, device=device, strategy=strategy)
    if strategy == "ddp" and (dims.tp > 1 or dims.cp > 1 or dims.ep > 1):
        raise ConfigError(
            f"parallel.strategy: ddp replicates whole models; {dims.describe()} splits them: use fsdp (or auto)"
        )
    apply_tensor_and_expert_parallel(model, dims)
    if dims.cp > 1:
        from honing.models.ulysses import apply_context_parallel

        apply_context_parallel(model, dims)
    blocks = find_blocks(model)
    if activation_checkpointing != "none" and not blocks:
        log.warning(
            "parallel.activation_checkpointing: no list of repeated blocks found in %s; nothing is checkpointed",
            type(model).__name__,
        )
    apply_activation_checkpointing(blocks, activation_checkpointing, activation_checkpointing_every)
    if activation_offload:  # outside the checkpointing: a checkpointed block's saved inputs go to the host
        for module_list in blocks:
            for block in module_list:
                offload_block_activations(block)
    if compile:
        for module_list in blocks:
            for block in module_list:
                block.compile()  # in place: parameter names keep no "_orig_mod." part
    if strategy == "ddp":
        # Buffers (e.g. rotary frequencies) are the same on every rank; broadcasting them on every
        # forward would also make evaluation hang when ranks run different numbers of batches.
        return nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None, broadcast_buffers=False
        )
    # tensor or sequence parallelism alone leaves no data-parallel rank to shard over
    if strategy == "fsdp" and (dims.grad_divisor > 1 or dims.world_size == 1):
        shard_data_parallel(
            model,
            dims,
            blocks,
            policy=mixed_precision_policy(mixed_precision, precision=precision, device=device),
            reshard_after_forward=reshard_after_forward,
            offload_policy=offload_policy(offload),
        )
    return model


def shard_data_parallel(
    model: nn.Module,
    dims: ParallelDims,
    blocks: list[nn.ModuleList],
    *,
    policy: MixedPrecisionPolicy,
    reshard_after_forward: bool,
    offload_policy: OffloadPolicy | None = None,
) -> None:
    """FSDP2 over the ranks that see other tokens (``dp_shard × ep × cp``; HSDP with ``dp_replicate``): each block,
    the experts of a MoE block first (on ``efsdp``, their gradients averaged like the rest), then the root."""
    from torch.distributed.fsdp import fully_shard

    replicated = ("dp_replicate",) if dims.dp_replicate > 1 else ()
    mesh = dims.submesh(*replicated, "fsdp")
    offload = {} if offload_policy is None else {"offload_policy": offload_policy}
    for experts in expert_modules(model, dims):
        fully_shard(
            experts, mesh=dims.submesh(*replicated, "efsdp"), mp_policy=policy, reshard_after_forward=True, **offload
        )
        # an expert's gradient sums the tokens of every ep rank (the all-to-all's backward) but FSDP2 divides by
        # its own group only: divide by every rank that sees other tokens, as the dense weights are
        experts.set_gradient_divide_factor(float(dims.grad_divisor))
        if dims.dp_replicate * dims.dp_shard * dims.cp > 1:
            # FSDP2 applies a divide factor other than the group size through PREMUL_SUM, which gloo rejects
            experts.set_force_sum_reduction_for_comms(True)
    if not blocks:
        log.warning(
            "parallel.strategy fsdp: no list of repeated blocks found in %s; the whole model is "
            "one FSDP unit (no overlap of communication and compute)",
            type(model).__name__,
        )
    for module_list in blocks:
        for index, block in enumerate(module_list):
            # backward starts with the last block: keeping it gathered after forward saves an all-gather
            last = index == len(module_list) - 1
            fully_shard(
                block, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard_after_forward and not last, **offload
            )
    # The root is the Hugging Face model itself, also inside a peft wrapper: generate() calls its
    # forward directly, and the root's hooks must run there to gather the weights outside the blocks.
    root = transformers_model(model)
    fully_shard(root, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard_after_forward, **offload)
    # transformers' generate() then keeps every rank running forward until all ranks finish
    # (synced_gpus), so sampling under FSDP never leaves one rank waiting in an all-gather.
    root._is_fsdp_managed_module = True


def fsdp_root(model: nn.Module) -> FSDPModule | None:
    """The FSDP2 root module of ``model`` (itself or, for LoRA, the model inside peft), or None."""
    from torch.distributed.fsdp import FSDPModule

    for candidate in (model, transformers_model(model)):
        if isinstance(candidate, FSDPModule):
            return candidate
    return None


def is_fsdp(model: nn.Module) -> bool:
    """True when ``model`` is sharded with FSDP2 (its weights are split over ranks)."""
    return fsdp_root(model) is not None


def is_sharded(model: nn.Module) -> bool:
    """True when some weight of ``model`` is split over ranks (FSDP2, tensor or expert parallelism): gathering
    its full weights then takes every rank."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(param, DTensor) for param in model.parameters())


@contextlib.contextmanager
def gradient_sync(model: nn.Module, enabled: bool) -> Iterator[None]:
    """Reduce gradients across ranks in this backward only when ``enabled`` (the last micro-batch);
    earlier micro-batches accumulate locally without communication."""
    if isinstance(model, nn.parallel.DistributedDataParallel) and not enabled:
        with model.no_sync():
            yield
        return
    root = fsdp_root(model)
    if root is not None:
        root.set_requires_gradient_sync(enabled)  # recurses into every block
    yield


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's full (unsharded) weights on CPU, keyed as in the unwrapped model. Call on every
    rank (FSDP2 gathers with collectives); rank 0 gets the weights, other ranks an empty dict."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def _params_by_mesh(params: list[torch.nn.Parameter]) -> list[list[torch.nn.Parameter]]:
    """The parameters of ``params`` that have gradients, grouped by the device mesh their DTensors live on (plain
    tensors together): one foreach kernel never mixes meshes."""
    by_mesh: dict[DeviceMesh | None, list[torch.nn.Parameter]] = {}
    for param in params:
        if param.grad is not None:
            by_mesh.setdefault(getattr(param.grad, "device_mesh", None), []).append(param)
    return list(by_mesh.values())


def grads_by_mesh(params: list[torch.nn.Parameter]) -> list[list[torch.nn.Parameter]]:
    """The parameters of ``params`` that have gradients, grouped by device mesh: what ``total_grad_norm`` and
    ``clip_grads`` take, computed once a step for both."""
    return _params_by_mesh(params)


def total_grad_norm(
    params: list[torch.nn.Parameter], groups: list[list[torch.nn.Parameter]] | None = None, *, one_device: bool = False
) -> torch.Tensor:
    """The L2 norm of every gradient of ``params`` together, the same on every rank, as a plain tensor
    (``groups``: ``grads_by_mesh(params)`` when the caller has it already; ``one_device``: ``on_one_device(params)``,
    which a caller with fixed parameters asks once).

    Weights split over ranks are DTensors, possibly on different meshes (FSDP2 over data-parallel ranks, tensor
    parallelism, experts over ``ep``): each mesh's gradients are normed together, made whole, then combined."""
    norms = []
    for group in _params_by_mesh(params) if groups is None else groups:
        grads = [param.grad for param in group]
        norm = _one_device_norm(grads) if one_device else torch.nn.utils.get_total_norm(grads)
        norms.append(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
    if not norms:
        return torch.zeros(())
    if len(norms) == 1:
        return norms[0]
    return torch.linalg.vector_norm(torch.stack([norm.to(norms[0].device) for norm in norms]))


def clip_grads(
    params: list[torch.nn.Parameter],
    max_norm: float,
    total_norm: torch.Tensor,
    groups: list[list[torch.nn.Parameter]] | None = None,
    *,
    one_device: bool = False,
) -> None:
    """Scale the gradients of ``params`` so that their total norm is at most ``max_norm`` (no host sync;
    ``groups``: ``grads_by_mesh(params)`` when the caller has it already; ``one_device``: ``on_one_device(params)``,
    with ``total_norm`` on that device)."""
    from torch.distributed.tensor.experimental import implicit_replication

    for group in _params_by_mesh(params) if groups is None else groups:
        if one_device:
            _scale_one_device([param.grad for param in group], float(max_norm), total_norm)
            continue
        # the plain-tensor coefficient multiplies DTensor gradients as a replicated scalar
        with implicit_replication():
            torch.nn.utils.clip_grads_with_norm_(group, max_norm, total_norm)


def on_one_device(params: list[torch.nn.Parameter]) -> bool:
    """Whether ``params`` are plain tensors (no DTensor) of one CPU or CUDA device and one dtype: their gradients,
    which torch keeps at their parameter's device and dtype, then make the one group and the one foreach call of
    torch's ``get_total_norm`` and ``clip_grads_with_norm_``. Asked once for fixed parameters: a check per gradient
    every step costs about what it saves."""
    if not params:
        return False
    first = params[0]
    return first.device.type in ("cpu", "cuda") and all(
        type(param.data) is torch.Tensor and param.device == first.device and param.dtype == first.dtype
        for param in params
    )


@torch.no_grad()
def _one_device_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    """The L2 norm of ``grads`` together as torch's ``get_total_norm`` computes it for one device and dtype (one
    ``_foreach_norm``, the norms stacked in order, their norm: the same bits), without its per-gradient ``.to`` to
    the first gradient's device, a no-op call per parameter that costs more than the norm on a small model."""
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)


@torch.no_grad()
def _scale_one_device(grads: list[torch.Tensor], max_norm: float, total_norm: torch.Tensor) -> None:
    """torch's ``clip_grads_with_norm_`` for gradients on one device and dtype, without its grouping and its no-op
    ``.to`` of the coefficient: the same coefficient, clamped at 1 (no host sync), in one ``_foreach_mul_``."""
    torch._foreach_mul_(grads, torch.clamp(max_norm / (total_norm + 1e-6), max=1.0))
