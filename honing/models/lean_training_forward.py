"""A lean forward for training Llama-shaped decoders (and the Qwen-VL families' language models): transformers'
numbers, bit for bit, gradients included, in fewer operators.

transformers' decoder forward builds its mask through a generic mask factory, rotates queries and keys with
``rotate_half`` on the heads' transposed layout (two slices, a negation and a cat: four operators forward and four
backward nodes, two of which allocate full-size zeros), casts to the dtype it already has, and goes through several
decorators and a module call for every submodule. This forward runs the same arithmetic in the same order over the
model's own weights and modules:

- the padding mask is built once as ``tril & padding`` (what ``create_causal_mask`` gives for sdpa; None, so
  sdpa runs causally, when no token is padding);
- the rotation multiplies the halves-exchanged input (one gather) by the sine with its sign folded in, on the
  projections' contiguous layout before the heads are transposed: ``rotate_half(x) * sin`` and
  ``x[swap] * signed_sin`` are the same products of the same numbers, in two thirds of the time forward and backward;
- a plain ``nn.Linear`` without hooks is ``F.linear`` over its weights (an adapter layer, LoRA's, is called as
  the module it is), RMSNorm skips the casts to the dtype it has.

What it saves is per-operator overhead: a few percent of a small model's step on a CPU (the matmuls and sdpa
stay), less on larger models. It takes the calls it computes exactly: sdpa attention, no cache, a 2-D padding mask
(or none, or sdpa's 4-D boolean one), no packed rows (positions that restart without a mask), no sliding window,
no request for hidden states or attentions; every other call runs transformers' own forward. A layer with hooks
(FSDP2's), a forward of its own (activation checkpointing, offloading), a compiled call or sharded weights is
called as the module it is, with the mask and rotary tables transformers gives it.
"""

from __future__ import annotations

import functools
import types
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from honing.data.vision.causal_masks import causal_padding_mask
from honing.models.lean_decoder import global_hooks, is_sharded, plain_linear, uses_sliding_window
from honing.models.lean_vision_attention import lean_vision_attention

# the decoders whose layer is Llama's (pre-norm attention with optional per-head q/k norms, a SiLU-gated MLP):
# text models that take 1-D positions, and the Qwen-VL families' language models that take 3-D (M-RoPE) ones
PLAIN_ROPE = frozenset({"llama", "mistral", "qwen2", "qwen3"})
MULTIMODAL_ROPE = frozenset({"qwen2_vl_text", "qwen2_5_vl_text"})
# keywords of a forward that this one honours by ignoring them (their falsy values ask for nothing)
QUIET_KEYWORDS = frozenset({"output_attentions", "output_hidden_states", "return_dict"})
# keywords the Qwen-VL models pass on to their language model, which sdpa attention does not read
UNREAD_KEYWORDS = frozenset({"image_position_ids"})


def use_lean_forwards(model: nn.Module) -> list[nn.Module]:
    """``model.lean_forward``: the lean decoder forward and the batched vision attention wherever they apply; the
    modules that took them."""
    return lean_training_forward(model) + lean_vision_attention(model)


def lean_training_forward(model: nn.Module) -> list[nn.Module]:
    """Give every decoder in ``model`` that this file computes exactly the lean forward; the decoders it took."""
    taken = []
    for module in model.modules():
        config = getattr(module, "config", None)
        model_type = getattr(config, "model_type", None)
        if model_type not in PLAIN_ROPE | MULTIMODAL_ROPE or not _llama_shaped(module, config):
            continue
        module.forward = types.MethodType(_lean_forward, module)
        taken.append(module)
    return taken


def _llama_shaped(decoder: nn.Module, config: Any) -> bool:
    needed = ("embed_tokens", "layers", "norm", "rotary_emb")
    if not all(hasattr(decoder, name) for name in needed) or getattr(config, "hidden_act", None) != "silu":
        return False
    if uses_sliding_window(config) or getattr(decoder, "has_sliding_layers", False):
        return False
    return all(_plain_layer(layer) for layer in decoder.layers)


def _plain_layer(layer: nn.Module) -> bool:
    attention, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
    parts = ("input_layernorm", "post_attention_layernorm")
    if attention is None or mlp is None or not all(hasattr(layer, name) for name in parts):
        return False
    projections = ("q_proj", "k_proj", "v_proj", "o_proj")
    return all(hasattr(attention, name) for name in projections) and all(
        hasattr(mlp, name) for name in ("gate_proj", "up_proj", "down_proj")
    )


def takes_lean_path(
    decoder: nn.Module, cache: Any, use_cache: Any, attention_mask: Any, position_ids: Any, kwargs: dict
) -> bool:
    """Whether this call is one the lean forward computes exactly (else transformers' own forward runs)."""
    if torch.compiler.is_compiling():
        return False  # a whole model under torch.compile: transformers' forward is the one written for tracing
    if cache is not None or use_cache or any(kwargs.get(key) for key in QUIET_KEYWORDS - {"return_dict"}):
        return False
    if kwargs.get("return_dict") is False or set(kwargs) - QUIET_KEYWORDS - UNREAD_KEYWORDS:
        return False
    if decoder.config._attn_implementation != "sdpa" or global_hooks():
        return False
    if attention_mask is not None and not _padding_or_boolean_mask(attention_mask):
        return False
    if position_ids is not None and position_ids.dim() == 3 and position_ids.shape[0] == 4:
        return False  # packed Qwen-VL rows: the mask comes from the text positions
    if attention_mask is None and position_ids is not None and position_ids.dim() == 2:
        from transformers.masking_utils import find_packed_sequence_indices

        # packed rows (positions restarting): transformers keeps attention within each document
        return find_packed_sequence_indices(position_ids) is None
    return True


def _padding_or_boolean_mask(mask: torch.Tensor) -> bool:
    """A 2-D padding mask, or a 4-D boolean one (honing's collators build it; transformers takes it as it is)."""
    if mask.dim() == 2:
        return not mask.is_floating_point()
    return mask.dim() == 4 and mask.dtype == torch.bool


def _bare(layer: nn.Module) -> bool:
    """Whether ``layer`` run as plain arithmetic loses nothing: no hooks, no checkpointing, no compiled call, no
    sharded weights."""
    if getattr(layer, "gradient_checkpointing", False) or getattr(layer, "_compiled_call_impl", None) is not None:
        return False
    if "forward" in layer.__dict__:  # a forward of its own (honing's activation checkpointing or offloading)
        return False
    for module in (layer, layer.self_attn, layer.mlp, layer.input_layernorm, layer.post_attention_layernorm):
        if module._forward_hooks or module._forward_pre_hooks:
            return False
    return not any(is_sharded(p) for p in layer.parameters())  # FSDP2's, tensor parallelism's DTensors


def _lean_forward(
    self: nn.Module,
    input_ids: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    cache: Any = None,
    inputs_embeds: torch.Tensor | None = None,
    use_cache: bool | None = None,
    **kwargs: Any,
) -> Any:
    if cache is None and "past_key_values" in kwargs:  # the keyword's name before transformers 5.40
        cache = kwargs.pop("past_key_values")
    if not takes_lean_path(self, cache, use_cache, attention_mask, position_ids, kwargs):
        return type(self).forward(
            self,
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
    from transformers.modeling_outputs import BaseModelOutputWithPast

    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
    hidden = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
    positions = _positions(self, hidden, position_ids)
    cos, sin = self.rotary_emb(hidden, positions)
    rotation = _Rotation(cos, sin, self.config.num_attention_heads)
    mask = sdpa_mask(attention_mask)
    for layer in self.layers:
        if _bare(layer):
            hidden = _layer(layer, hidden, rotation, mask)
        else:  # hooked (FSDP2), checkpointed, offloaded or compiled: its own call, with what transformers passes it
            hidden = layer(hidden, attention_mask=mask, position_embeddings=(cos, sin), position_ids=None)
    return BaseModelOutputWithPast(last_hidden_state=self.norm(hidden))


def _positions(decoder: nn.Module, hidden: torch.Tensor, position_ids: torch.Tensor | None) -> torch.Tensor:
    """The positions transformers' forward gives the rotary module (3-D for the Qwen-VL language models)."""
    multimodal = decoder.config.model_type in MULTIMODAL_ROPE
    if position_ids is None:
        position_ids = torch.arange(hidden.shape[1], device=hidden.device)
        return position_ids.view(1, 1, -1).expand(3, hidden.shape[0], -1) if multimodal else position_ids[None]
    if multimodal and position_ids.dim() == 2:
        return position_ids[None, ...].expand(3, position_ids.shape[0], -1)
    return position_ids


def sdpa_mask(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """sdpa's boolean mask ``[rows, 1, length, length]`` for a 2-D padding mask, as ``create_causal_mask`` builds
    it; None when no token is padding (sdpa then runs causally); a 4-D boolean mask as it is."""
    if attention_mask is not None and attention_mask.dim() == 4:
        return attention_mask  # already sdpa's (honing's VL collator builds it so)
    if attention_mask is None or bool(attention_mask.all()):
        return None
    return causal_padding_mask(attention_mask)


class _Rotation:
    """A forward's rotary tables on the projections' own layout ``[rows, length, heads * head_dim]``: cos and the
    sine with its sign folded in, repeated for every query head, and the gather that exchanges each head's halves,
    so ``rotate_half(x) * sin`` is ``x[..., swap] * signed_sin``: the same products of the same numbers, on
    contiguous inputs, before the heads are transposed for sdpa (two thirds of transformers' rotation's time)."""

    def __init__(self, cos: torch.Tensor, sin: torch.Tensor, heads: int):
        head_dim = cos.shape[-1]
        half = head_dim // 2
        signed_sin = torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)
        self.heads = heads
        swap, self.swap = _swap_indices(heads, head_dim, cos.device)
        self.per_head = cos[:, None], signed_sin[:, None], swap  # for inputs already [rows, heads, length, head_dim]

    @functools.cached_property
    def wide(self) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and the signed sine repeated for every query head (made on first use: Qwen3's path needs none)."""
        cos, signed_sin, _ = self.per_head
        return cos[:, 0].repeat(1, 1, self.heads), signed_sin[:, 0].repeat(1, 1, self.heads)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[rows, length, n * head_dim]`` rotated (keys' ``n`` may be fewer than the query heads)."""
        width = x.shape[-1]
        cos, signed_sin = (table[..., :width] for table in self.wide)
        return x * cos + x.index_select(-1, self.swap[:width]) * signed_sin

    def transposed(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[rows, heads, length, head_dim]`` rotated (as transformers does it, the heads transposed first:
        Qwen3's per-head norms sum their weight's gradient in that layout)."""
        cos, signed_sin, swap = self.per_head
        return x * cos + x.index_select(-1, swap) * signed_sin


@functools.lru_cache(maxsize=32)
def _swap_indices(heads: int, head_dim: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The indices that exchange the halves of one head's ``head_dim``, and of each of ``heads`` heads side by side
    (made once per shape, not in every forward)."""
    half = head_dim // 2
    swap = torch.cat([torch.arange(half, head_dim), torch.arange(half)]).to(device)
    return swap, torch.cat([swap + head * head_dim for head in range(heads)])


def _layer(
    layer: nn.Module,
    hidden: torch.Tensor,
    rotation: _Rotation,
    mask: torch.Tensor | None,
) -> torch.Tensor:
    hidden = hidden + _attention(layer.self_attn, _rms_norm(layer.input_layernorm, hidden), rotation, mask)
    mlp = layer.mlp
    normed = _rms_norm(layer.post_attention_layernorm, hidden)
    gated = mlp.act_fn(plain_linear(mlp.gate_proj, normed)) * plain_linear(mlp.up_proj, normed)
    return hidden + plain_linear(mlp.down_proj, gated)


def _attention(
    attention: nn.Module,
    hidden: torch.Tensor,
    rotation: _Rotation,
    mask: torch.Tensor | None,
) -> torch.Tensor:
    rows, length = hidden.shape[:2]
    head_dim = attention.head_dim
    query, key = plain_linear(attention.q_proj, hidden), plain_linear(attention.k_proj, hidden)
    value = plain_linear(attention.v_proj, hidden).view(rows, length, -1, head_dim).transpose(1, 2)
    if hasattr(attention, "q_norm"):  # Qwen3: each head normed before the rotation
        query = rotation.transposed(attention.q_norm(query.view(rows, length, -1, head_dim)).transpose(1, 2))
        key = rotation.transposed(attention.k_norm(key.view(rows, length, -1, head_dim)).transpose(1, 2))
    else:
        query = rotation(query).view(rows, length, -1, head_dim).transpose(1, 2)
        key = rotation(key).view(rows, length, -1, head_dim).transpose(1, 2)
    groups = getattr(attention, "num_key_value_groups", 1)
    gqa = {}
    if groups > 1 and mask is None:
        gqa = {"enable_gqa": True}  # as transformers' sdpa call: grouped heads without a mask
    elif groups > 1:
        key, value = _repeat_heads(key, groups), _repeat_heads(value, groups)
    out = F.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=mask,
        dropout_p=attention.attention_dropout if attention.training else 0.0,
        scale=attention.scaling,
        is_causal=mask is None and length > 1,
        **gqa,
    )
    return plain_linear(attention.o_proj, out.transpose(1, 2).reshape(rows, length, -1))


def _repeat_heads(x: torch.Tensor, groups: int) -> torch.Tensor:
    """transformers' ``repeat_kv``: each key/value head repeated for its group of query heads."""
    rows, heads, length, head_dim = x.shape
    return x[:, :, None].expand(rows, heads, groups, length, head_dim).reshape(rows, heads * groups, length, head_dim)


def _rms_norm(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Llama's RMSNorm with the same operators, less the casts to the dtype ``x`` already has."""
    if x.dtype != torch.float32 or not hasattr(norm, "variance_epsilon"):
        return norm(x)
    variance = x.pow(2).mean(-1, keepdim=True)
    return norm.weight * (x * torch.rsqrt(variance + norm.variance_epsilon))
