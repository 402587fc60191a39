"""Ulysses sequence parallelism (DeepSpeed-Ulysses, VeOmni): attention over rows whose tokens are split over ranks.

Each of the ``cp`` ranks of a sequence-parallel group holds a contiguous slice of every row's tokens, so the
embeddings, MLPs, norms and the loss cost ``1/cp`` of the row. Attention needs every token: before it, an
all-to-all turns ``[batch, heads, seq/cp, head_dim]`` into ``[batch, heads/cp, seq, head_dim]`` (each rank attends
over the whole row with a share of the heads); the model's own kernel (sdpa, eager, flash, flex) runs unchanged;
the inverse all-to-all gives every rank its slice back with all heads. The model code stays the library's:
:func:`apply_context_parallel` registers the wrapper with transformers' attention interface and selects it.

A forward that splits its rows passes ``ulysses_position_ids`` (the whole row's positions; flash attention reads
packed documents' boundaries from them) and, as ``attention_mask``, the whole row's mask from
:func:`full_row_attention` (a 4D mask or a flex ``BlockMask``, which transformers passes to the layers as it is).
Any other forward (generation, samples) holds whole rows and runs the inner kernel directly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from honing.errors import ConfigError
from honing.models.attention_choice import attention_kernel
from honing.models.wrappers import transformers_model
from honing.parallel_dims import ParallelDims

if TYPE_CHECKING:
    from torch.autograd.function import FunctionCtx
    from torch.distributed import ProcessGroup
    from torch.nn.attention.flex_attention import BlockMask
    from transformers import PretrainedConfig

PREFIX = "ulysses_"


class _AllToAll(torch.autograd.Function):
    """``all_to_all_single`` of a ``[group size, ...]`` tensor: chunk ``j`` goes to rank ``j``, the chunk from rank
    ``i`` lands at ``i``. With equal chunks the operation is its own adjoint, so backward is the same exchange."""

    @staticmethod
    def forward(ctx: FunctionCtx, chunks: torch.Tensor, group: ProcessGroup | None) -> torch.Tensor:  # type: ignore[override]
        ctx.group = group
        chunks = chunks.contiguous()  # before empty_like, which would copy a transpose's strides
        received = torch.empty_like(chunks)
        dist.all_to_all_single(received, chunks, group=group)
        return received

    @staticmethod
    def backward(ctx: FunctionCtx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        grad = grad.contiguous()
        received = torch.empty_like(grad)
        dist.all_to_all_single(received, grad, group=ctx.group)
        return received, None


def sequence_to_heads(states: Sequence[torch.Tensor], group: ProcessGroup | None, size: int) -> list[torch.Tensor]:
    """Each ``[batch, heads, seq/size, dim]`` on each rank → ``[batch, heads/size, seq, dim]``: rank ``r`` keeps
    heads ``r·heads/size …`` of the whole row (its slice first from rank 0, then rank 1, ...). Query, key and value
    travel in one all-to-all when their head sizes agree (one latency instead of three)."""
    if len({state.shape[-1] for state in states}) > 1:  # e.g. MLA's value heads: one exchange each
        return [part for state in states for part in sequence_to_heads([state], group, size)]
    batch, _, local, dim = states[0].shape
    shares = [state.shape[1] // size for state in states]
    chunks = torch.cat([state.reshape(batch, size, share, local, dim) for state, share in zip(states, shares)], 2)
    received = _AllToAll.apply(chunks.transpose(0, 1), group)  # [source rank = slice of the row, batch, ...]
    whole_rows = received.permute(1, 2, 0, 3, 4).reshape(batch, sum(shares), size * local, dim)
    return list(whole_rows.split(shares, dim=1))


def heads_to_sequence(output: torch.Tensor, group: ProcessGroup | None, size: int) -> torch.Tensor:
    """The inverse for attention's output, laid out ``[batch, seq, heads/size, dim]`` as transformers' kernels
    return it: → ``[batch, seq/size, heads, dim]``, this rank's slice of the row with every head."""
    batch, length, heads, dim = output.shape
    chunks = output.reshape(batch, size, length // size, heads, dim).transpose(0, 1)
    received = _AllToAll.apply(chunks, group)  # [source rank = group of heads, batch, local, heads/size, dim]
    return received.permute(1, 2, 0, 3, 4).reshape(batch, length // size, size * heads, dim)


class _FewerKeyValueGroups:
    """The attention module as the inner kernel sees it when key/value heads were repeated before the all-to-all:
    kernels that expand key/value heads themselves (eager, sdpa) read ``num_key_value_groups``."""

    def __init__(self, module: nn.Module, groups: int):
        self._module = module
        self.num_key_value_groups = groups

    def __getattr__(self, name: str) -> object:
        return getattr(self._module, name)


def ulysses_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | BlockMask | None,
    *,
    inner: str,
    group: ProcessGroup | None,
    size: int,
    ulysses_position_ids: torch.Tensor | None = None,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """Attention of this rank's slice of every row (``query`` ``[batch, heads, seq/size, dim]``) over the whole
    rows, by the ``inner`` kernel between two all-to-alls over ``group``; returns ``[batch, seq/size, heads, dim]``."""
    kernel = attention_kernel(module, inner)
    if ulysses_position_ids is None:  # whole rows on every rank: generation, samples
        return kernel(module, query, key, value, attention_mask, **kwargs)
    length = ulysses_position_ids.shape[-1]
    if isinstance(attention_mask, torch.Tensor) and attention_mask.shape[-1] != length:
        raise RuntimeError(
            f"ulysses attention got a mask over {attention_mask.shape[-1]} keys for rows of {length} tokens: a split "
            "forward passes the whole row's mask (honing.models.ulysses.full_row_attention)"
        )
    window = kwargs.get("sliding_window")
    if window is not None and window < length:
        raise RuntimeError(f"ulysses attention: a sliding window of {window} tokens over rows of {length} tokens")
    heads, kv_heads = query.shape[1], key.shape[1]
    repeats = size // math.gcd(kv_heads, size)  # fewer key/value heads than ranks: each rank needs whole ones
    if repeats > 1:
        key, value = key.repeat_interleave(repeats, dim=1), value.repeat_interleave(repeats, dim=1)
        module = _FewerKeyValueGroups(module, heads // (kv_heads * repeats))  # type: ignore[assignment]
    query, key, value = sequence_to_heads((query, key, value), group, size)
    kwargs["position_ids"] = ulysses_position_ids  # flash attention's varlen path reads documents from them
    output, _ = kernel(module, query, key, value, attention_mask, **kwargs)
    # the weights of a share of the heads over the whole row are of no use to the caller
    return heads_to_sequence(output, group, size), None


def _register(inner: str, group: ProcessGroup | None, size: int) -> str:
    """Register the wrapper around ``inner`` for ``group`` (a run has one sequence-parallel group; registering again
    replaces the previous one) and return its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    name = PREFIX + inner

    def attention(module, query, key, value, attention_mask, **kwargs):  # type: ignore[no-untyped-def]
        return ulysses_attention(
            module, query, key, value, attention_mask, inner=inner, group=group, size=size, **kwargs
        )

    AttentionInterface.register(name, attention)
    if inner in ALL_MASK_ATTENTION_FUNCTIONS:
        # the inner kernel's masks: a forward of whole rows (generation) builds them as usual
        ALL_MASK_ATTENTION_FUNCTIONS.register(name, ALL_MASK_ATTENTION_FUNCTIONS[inner])
    return name


def check_context_parallel(config: PretrainedConfig, dims: ParallelDims, seq_len: int | None = None) -> None:
    """Refuse, in one line naming ``parallel.cp``, a model or row length Ulysses cannot split: attention heads (per
    tensor-parallel rank) not divisible by cp, ``seq_len`` not divisible by cp, a sliding window shorter than rows."""
    if dims.cp <= 1:
        return
    heads = config.num_attention_heads // dims.tp
    if heads % dims.cp:
        per_rank = f" per tensor-parallel rank (tp={dims.tp})" if dims.tp > 1 else ""
        raise ConfigError(
            f"parallel.cp={dims.cp} must divide the model's attention heads{per_rank} ({heads}): each "
            "sequence-parallel rank attends with a share of the heads"
        )
    if seq_len is not None and seq_len % dims.cp:
        raise ConfigError(f"parallel.cp={dims.cp} must divide data.seq_len ({seq_len})")
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None) or ()
    slides = any(kind != "full_attention" for kind in layer_types) or (
        not layer_types and window is not None and getattr(config, "use_sliding_window", True)
    )
    # without seq_len (at parallelize time) the attention itself refuses rows longer than the window
    if slides and window is not None and seq_len is not None and window < seq_len:
        raise ConfigError(
            f"parallel.cp={dims.cp}: the model's sliding-window attention ({window} tokens) is not split by the "
            f"Ulysses attention; use rows of at most {window} tokens (data.seq_len) or parallel.cp=1"
        )


def apply_context_parallel(model: nn.Module, dims: ParallelDims) -> None:
    """Switch ``model``'s attention to Ulysses over the ``cp`` ranks of ``dims`` (its kernel stays the inner one)."""
    hf_model = transformers_model(model)
    config = hf_model.config
    check_context_parallel(config.get_text_config() if hasattr(config, "get_text_config") else config, dims)
    current = config._attn_implementation
    if not isinstance(current, str):
        raise ConfigError(f"parallel.cp={dims.cp}: the model's attention implementation is {current!r}, not one name")
    inner = current.removeprefix(PREFIX)
    hf_model.set_attn_implementation(_register(inner, dims.group("cp"), dims.cp))


def inner_implementation(model: nn.Module) -> str:
    """The kernel the Ulysses attention of ``model`` wraps (its implementation itself when it has none)."""
    return str(transformers_model(model).config._attn_implementation).removeprefix(PREFIX)


def full_row_attention(
    model: nn.Module, position_ids: torch.Tensor, padding_mask: torch.Tensor | None = None
) -> dict[str, Any]:
    """The keyword arguments a split forward adds: the mask over whole rows of ``position_ids`` (packed documents
    restart their positions) and ``padding_mask``, built by the inner kernel's own mask function exactly as one
    process builds it, and the whole rows' positions."""
    from transformers.masking_utils import create_causal_mask

    hf_model = transformers_model(model)
    config = hf_model.config
    rows, length = position_ids.shape
    dtype = hf_model.get_input_embeddings().weight.dtype  # an eager mask's dtype is that of the embeddings
    # only the shape, dtype and device of the embeddings shape a mask
    embeddings = torch.empty((rows, length, 0), dtype=dtype, device=position_ids.device)
    mask = create_causal_mask(
        config=_WithImplementation(config, inner_implementation(model)),
        inputs_embeds=embeddings,
        attention_mask=padding_mask,
        cache=None,
        position_ids=position_ids,
    )
    return {"attention_mask": mask, "ulysses_position_ids": position_ids}


class _WithImplementation:
    """A model config read as if its attention implementation were ``name`` (masks are built per kernel)."""

    def __init__(self, config: PretrainedConfig, name: str):
        self._config = config
        self._attn_implementation = name

    def __getattr__(self, attribute: str) -> object:
        return getattr(self._config, attribute)
