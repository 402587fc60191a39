"""A lean KV-cached decoder for Llama-shaped models, for rollouts: the transformers forward's numbers with a
fraction of its per-token Python work.

A GRPO step decodes one token at a time for every completion, and at rollout batch sizes each of those forwards
is small: the transformers forward spends most of its time building masks, growing its cache by concatenation
and dispatching a hundred small operators a layer. This decoder runs the model's own modules (so LoRA adapters,
biases and the checkpoint's weights are the ones used) over a cache allocated once for the whole rollout, with a
padding mask kept as one additive buffer, and sdpa. What a step repeats is cut to the operators it needs (about 170
small ones a step for 4 layers, 377 with those they call): RoPE's cos and sin tabled once per head, one token's
hidden states kept 2-D (each projection one ``mm``, the rotation without broadcasting), every layer's cache slots
sliced at once, weights bound once per rollout, RMSNorm on the CPU as the kernels ``torch.rms_norm`` runs less its
overhead; every change there is checked to give the same bits as the straightforward computation, so seeded
completions do not move. It covers the architectures whose layer is
exactly Llama's (Llama, Mistral without a sliding window, Qwen2, Qwen3 with its per-head norms); anything else,
and sharded (FSDP2) models, whose forward must go through the root module's all-gather, return ``None`` from
:func:`lean_decoder` and decode with transformers.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from honing.models.wrappers import transformers_model

if TYPE_CHECKING:
    from transformers import PretrainedConfig

# model types whose decoder layer is Llama's: pre-norm attention (optional per-head q/k norms) and a SiLU-gated MLP
LLAMA_SHAPED = frozenset({"llama", "mistral", "qwen2", "qwen3"})


def lean_decoder(model: nn.Module) -> LeanDecoder | None:
    """A :class:`LeanDecoder` over ``model``'s own modules when this file decodes its architecture exactly, else
    ``None`` (decode with transformers)."""
    lm = transformers_model(model)
    config = getattr(lm, "config", None)
    if config is None or getattr(config, "model_type", None) not in LLAMA_SHAPED:
        return None
    if getattr(config, "hidden_act", None) != "silu" or uses_sliding_window(config):
        return None
    decoder = getattr(lm, "model", None)
    needed = ("embed_tokens", "layers", "norm", "rotary_emb")
    if decoder is None or not all(hasattr(decoder, name) for name in needed) or not hasattr(lm, "lm_head"):
        return None
    if global_hooks() or any(is_sharded(p) for p in lm.parameters()):
        return None  # hooks on every module expect module calls; sharded weights need the root's all-gather
    return LeanDecoder(lm)


def uses_sliding_window(config: PretrainedConfig) -> bool:
    """Whether the model's attention is windowed (Mistral's ``sliding_window``, Qwen's ``use_sliding_window``)."""
    if getattr(config, "model_type", None) in ("qwen2", "qwen3"):
        return bool(getattr(config, "use_sliding_window", False))
    return getattr(config, "sliding_window", None) is not None


def is_sharded(parameter: torch.Tensor) -> bool:
    """Whether ``parameter`` is a DTensor (FSDP2 / tensor parallel): its forward needs the root module's hooks."""
    return type(parameter).__name__ == "DTensor"


class LeanDecoder:
    """Prefill once, then one token per row per :meth:`step`, over a cache sized for the whole rollout."""

    def __init__(self, lm: nn.Module):
        config = lm.config
        self.lm = lm
        self.decoder = lm.model
        self.layers = list(self.decoder.layers)[: config.num_hidden_layers]
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.eps = config.rms_norm_eps
        # every layer's keys, then every layer's values, in one tensor: a step slices all of them with one operator
        self.cache = torch.empty(0)
        self.keys: list[torch.Tensor] = []  # the cache's layers, as views
        self.values: list[torch.Tensor] = []
        self.valid = torch.empty(0, dtype=torch.bool)
        self.length = 0
        self.position = torch.empty(0, dtype=torch.long)  # each row's last position, [rows]
        # ``valid`` as sdpa's additive [rows, 1, 1, capacity] mask (0 or -inf): a step slices its columns
        self.step_mask = torch.empty(0)
        # cos and signed sin of every position the rollout reaches, repeated for every query head: [capacity, heads *
        # head_dim], so a step rotates its 2-D projections without broadcasting (None: a RoPE whose frequencies change
        # with the length, computed per step as transformers does)
        self.rope_table: tuple[torch.Tensor, torch.Tensor] | None = None
        self.plans: list[_LayerPlan] = []  # the prefill's (tokens on an axis)
        self.step_plans: list[_LayerPlan] = []  # a step's ([rows, hidden]: plain projections as one mm each)
        self.step_head: Callable[[torch.Tensor], torch.Tensor] = lm.lm_head
        self.step_norm: Callable[[torch.Tensor], torch.Tensor] = lm.model.norm
        half = self.head_dim // 2  # the last axis's indices with its two halves exchanged (rotate_half's order)
        self.swap = torch.cat([torch.arange(half, self.head_dim), torch.arange(half)])
        # a step's: the same exchange in every head of a 2-D [rows, heads * head_dim] projection (a cheaper gather)
        self.wide_swap = torch.cat([self.swap + head * self.head_dim for head in range(self.heads)])
        self.key_swap = self.wide_swap[: self.kv_heads * self.head_dim].clone()
        self.gqa = self.kv_heads != self.heads
        self.residual = torch.empty(0)
        self.query_shape = self.key_shape = (0, self.heads, 1, self.head_dim)  # a step's heads as sdpa takes them

    def prefill(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int, shared_prefix: int = 0
    ) -> torch.Tensor:
        """Run the left-padded prompts, keep their keys and values; the next-token logits ``[rows, vocab]``.

        The first ``shared_prefix`` columns, when every row holds the same real tokens there (a chat template's
        opening, an instruction all prompts share; the rows' padding then sits after them), are computed once on
        the first row and their keys and values copied to the others: a batch's prefill is most of its work.
        """
        rows, length = input_ids.shape
        device = input_ids.device
        hidden = self.decoder.embed_tokens(input_ids[:1, :1])  # the dtype and device of the cache
        capacity = length + max_new_tokens
        self.cache = hidden.new_zeros((2 * len(self.layers), rows, self.kv_heads, capacity, self.head_dim))
        self.keys = [self.cache[index] for index in range(len(self.layers))]
        self.values = [self.cache[len(self.layers) + index] for index in range(len(self.layers))]
        # the keys a query may see: the prompts' real tokens, and every generated token (a step's mask ends at its own)
        self.valid = torch.ones(rows, capacity, dtype=torch.bool, device=device)
        self.valid[:, :length] = attention_mask.bool()
        # positions count real tokens only, as transformers' generate sets them for left-padded rows
        positions = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 1)
        causal = torch.ones(length, length, dtype=torch.bool, device=device).tril()
        # a padding query sees itself too: a row with no visible key would give NaN that then reaches real rows
        mask = (causal & self.valid[:, None, None, :length]) | torch.eye(length, dtype=torch.bool, device=device)
        mask = _additive(mask, hidden.dtype)
        self.length = length
        self.position = positions[:, -1].clone()
        self.residual = hidden.new_empty(rows, hidden.shape[-1])  # a step's hidden states, added to in place
        self.step_mask = _additive(self.valid[:, None, None], hidden.dtype)
        self.swap, self.wide_swap, self.key_swap = (x.to(device) for x in (self.swap, self.wide_swap, self.key_swap))
        self.query_shape = (rows, self.heads, 1, self.head_dim)
        self.key_shape = (rows, self.kv_heads, 1, self.head_dim)
        # hooks and adapters as they are now
        self.plans = [_LayerPlan(layer, self.eps, hidden, step=False) for layer in self.layers]
        self.step_plans = [_LayerPlan(layer, self.eps, hidden, step=True) for layer in self.layers]
        self.step_head = _projection(self.lm.lm_head, step=True)
        self.step_norm = _norm(self.decoder.norm, self.eps, hidden)
        self.rope_table = self._rope_table(hidden, capacity) if _static_rope(self.decoder.rotary_emb) else None
        shared = min(shared_prefix, length - 1) if rows > 1 else 0  # the last column's logits are every row's own
        if shared > 0:
            caches = self.keys, self.values
            self.keys, self.values = [k[:1] for k in caches[0]], [v[:1] for v in caches[1]]  # row 0's views
            prefix = self.decoder.embed_tokens(input_ids[:1, :shared])
            self._forward(prefix, *self._rope(prefix, positions[:1, :shared]), mask[:1, :, :shared, :shared], 0)
            self.keys, self.values = caches
            for cache in (*self.keys, *self.values):
                cache[1:, :, :shared] = cache[:1, :, :shared]
        hidden = self.decoder.embed_tokens(input_ids[:, shared:])
        return self._forward(hidden, *self._rope(hidden, positions[:, shared:]), mask[:, :, shared:], shared)

    def step(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Append one token per row; the next-token logits ``[rows, vocab]``."""
        if self.length >= self.valid.shape[1]:
            raise RuntimeError(f"the decode cache holds {self.length} tokens; prefill sized it for no more")
        self.position.add_(1)
        start = self.length
        self.length = end = start + 1
        hidden = _embed(self.decoder.embed_tokens, token_ids)  # [rows, hidden]: one token needs no token axis
        if self.rope_table is None:
            cos, signed_sin = (_wide(x, self.heads) for x in self._rope(hidden, self.position[:, None]))
        else:  # [rows, heads * head_dim]: the table's rows at each row's position
            cos, signed_sin = (table.index_select(0, self.position) for table in self.rope_table)
        rotation = cos, signed_sin, self.wide_swap
        width = self.kv_heads * self.head_dim  # keys rotate by the same tables' first heads
        key_rotation = rotation if not self.gqa else (cos[:, :width], signed_sin[:, :width], self.key_swap)
        mask = self.step_mask[..., :end]
        layers = len(self.step_plans)
        written, seen = self.cache[..., start:end, :].unbind(0), self.cache[..., :end, :].unbind(0)  # every layer's
        for index, plan in enumerate(self.step_plans):
            new = written[index], written[layers + index]
            cached = seen[index], seen[layers + index]
            attention = self._step_attention(plan, hidden, rotation, key_rotation, mask, new, cached)
            hidden = torch.add(hidden, attention, out=self.residual)
            normed = plan.post_norm(hidden)
            hidden.add_(plan.down(plan.mlp_product(plan.gate(normed), plan.up(normed))))
        return self.step_head(self.step_norm(hidden))

    def _step_attention(
        self,
        plan: _LayerPlan,
        hidden: torch.Tensor,
        rotation: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        key_rotation: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        mask: torch.Tensor,
        new: tuple[torch.Tensor, torch.Tensor],
        cached: tuple[torch.Tensor, torch.Tensor],
    ) -> torch.Tensor:
        """One layer's attention for a step's ``[rows, hidden]``: the token's rotated key and its value written into
        ``new`` (the cache at its column), its query attending over ``cached``."""
        normed = plan.input_norm(hidden)
        query, key = plan.q(normed), plan.k(normed)
        if plan.q_norm is not None:  # Qwen3: each head normed before the rotation
            query = plan.q_norm(query.view(self.query_shape)).view(query.shape)
            key = plan.k_norm(key.view(self.key_shape)).view(key.shape)
        new[1].copy_(plan.v(normed).view(self.key_shape))
        rotated, swapped = _rotate_2d(key, *key_rotation)
        torch.add(rotated.view(self.key_shape), swapped.view(self.key_shape), out=new[0])
        query = torch.add(*_rotate_2d(query, *rotation)).view(self.query_shape)
        out = F.scaled_dot_product_attention(query, *cached, attn_mask=mask, scale=plan.scaling, enable_gqa=self.gqa)
        return plan.o(out.view(hidden.shape[0], -1))  # [rows, heads, 1, head_dim] is [rows, heads * head_dim] in memory

    def _rope(self, hidden: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, signed_sin)`` ``[rows, 1, tokens, head_dim]`` at ``positions``, from the model's rotary module."""
        cos, sin = self.decoder.rotary_emb(hidden, positions)
        cos, sin = cos[:, None], sin[:, None]  # one for every head
        half = self.head_dim // 2
        # rotate_half(x) * sin == swap_halves(x) * signed_sin, with the sign folded in once for every layer
        return cos, torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)

    def _rope_table(self, hidden: torch.Tensor, capacity: int) -> tuple[torch.Tensor, torch.Tensor]:
        # the same elementwise cos and sin of the same products as per step, so the same bits, computed once
        positions = torch.arange(capacity, device=hidden.device)[None]
        cos, signed_sin = self._rope(hidden, positions)
        return _wide(cos[0, 0], self.heads), _wide(signed_sin[0, 0], self.heads)

    def _forward(
        self, hidden: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor, mask: torch.Tensor, start: int
    ) -> torch.Tensor:
        """The prefill's layers over ``hidden`` ``[rows, tokens, hidden]`` (keys and values cached from column
        ``start``); the last token's logits ``[rows, vocab]``."""
        end = start + hidden.shape[1]
        for index, plan in enumerate(self.plans):
            hidden = hidden + self._attention(plan, hidden, cos, signed_sin, mask, index, start, end)
            normed = plan.post_norm(hidden)
            hidden = hidden + plan.down(F.silu(plan.gate(normed)) * plan.up(normed))
        return plain_linear(self.lm.lm_head, self.step_norm(hidden[:, -1]))

    def _attention(
        self,
        plan: _LayerPlan,
        hidden: torch.Tensor,
        cos: torch.Tensor,
        signed_sin: torch.Tensor,
        mask: torch.Tensor,
        index: int,
        start: int,
        end: int,
    ) -> torch.Tensor:
        rows, tokens = hidden.shape[:2]
        normed = plan.input_norm(hidden)
        query = self._heads(plan.q(normed), plan.q_norm, self.heads)
        key = self._heads(plan.k(normed), plan.k_norm, self.kv_heads)
        value = self._heads(plan.v(normed), None, self.kv_heads)
        query = _rotate(query, cos, signed_sin, self.swap)
        _rotate(key, cos, signed_sin, self.swap, out=self.keys[index][:, :, start:end])  # straight into the cache
        self.values[index][:, :, start:end] = value
        out = F.scaled_dot_product_attention(
            query,
            self.keys[index][:, :, :end],
            self.values[index][:, :, :end],
            attn_mask=mask,
            scale=plan.scaling,
            enable_gqa=self.kv_heads != self.heads,
        )
        return plan.o(out.transpose(1, 2).reshape(rows, tokens, -1))

    def _heads(self, x: torch.Tensor, norm: Callable[[torch.Tensor], torch.Tensor] | None, heads: int) -> torch.Tensor:
        """A projection ``[rows, tokens, heads * head_dim]`` as ``[rows, heads, tokens, head_dim]``, each head
        RMS-normed first where the model does (Qwen3)."""
        x = x.view(*x.shape[:2], heads, self.head_dim)
        return (x if norm is None else norm(x)).transpose(1, 2)


class _LayerPlan:
    """One decoder layer's projections and norms resolved once per rollout: a plain ``nn.Linear`` without hooks
    becomes ``F.linear`` over its weights (no module call, no attribute look-ups on each of a step's seven
    projections), an adapter layer or a hooked module stays a module call."""

    def __init__(self, layer: nn.Module, eps: float, like: torch.Tensor, *, step: bool):
        attention, mlp = layer.self_attn, layer.mlp
        self.q, self.k, self.v, self.o = (_projection(getattr(attention, f"{n}_proj"), step) for n in "qkvo")
        mlps = (getattr(mlp, f"{n}_proj") for n in ("gate", "up", "down"))
        self.gate, self.up, self.down = (_projection(module, step) for module in mlps)
        self.input_norm = _norm(layer.input_layernorm, eps, like)
        self.post_norm = _norm(layer.post_attention_layernorm, eps, like)
        qwen3 = hasattr(attention, "q_norm")  # Qwen3: RMSNorm over each head before the rotation
        self.q_norm = _norm(attention.q_norm, eps, like) if qwen3 else None
        self.k_norm = _norm(attention.k_norm, eps, like) if qwen3 else None
        self.scaling = attention.scaling
        # SiLU(gate) * up; over a plain projection's new product, in place (a module's output may be kept elsewhere)
        self.mlp_product = _silu_product_in_place if isinstance(self.gate, partial) else _silu_product


def _silu_product(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up


def _silu_product_in_place(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate, inplace=True).mul_(up)


def _projection(module: nn.Module, step: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    """``module`` as a function; a plain ``nn.Linear`` as ``F.linear``, or for a step's 2-D input as the very
    kernel ``F.linear`` calls there (``mm`` / ``addmm`` with the weight's transpose), less its dispatch."""
    if type(module) is not nn.Linear or module._forward_hooks or module._forward_pre_hooks:
        return module
    if not step:
        return partial(F.linear, weight=module.weight, bias=module.bias)
    if module.bias is None:
        return partial(torch.mm, mat2=module.weight.t())
    return partial(torch.addmm, module.bias, mat2=module.weight.t())


def _additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean attention mask as the additive one sdpa turns it into on every call (0 where seen, -inf
    elsewhere, in the queries' dtype): converted once, not in each layer of each step."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))


def _static_rope(rotary: nn.Module) -> bool:
    """Whether ``rotary``'s frequencies are fixed (not dynamic NTK or LongRoPE, which change with the length)."""
    rope_type = getattr(rotary, "rope_type", None)
    return isinstance(rope_type, str) and "dynamic" not in rope_type and rope_type != "longrope"


def _embed(embedding: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """``embedding(ids)`` of 1-D ``ids``; a plain ``nn.Embedding`` without hooks as the gather ``F.embedding``
    makes of them."""
    plain = type(embedding) is nn.Embedding and embedding.max_norm is None
    if plain and not (embedding._forward_hooks or embedding._forward_pre_hooks):
        return embedding.weight.index_select(0, ids)
    return embedding(ids)


def _rotate(
    x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor, swap: torch.Tensor, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Rotary embedding of ``x`` ``[rows, heads, tokens, head_dim]`` as transformers' ``apply_rotary_pos_emb``
    (into ``out`` when given); ``swap`` indexes the last axis with its halves exchanged (one gather)."""
    return torch.add(x * cos, x.index_select(-1, swap) * signed_sin, out=out)


def _rotate_2d(
    x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor, wide_swap: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The two terms of a step's rotary embedding of ``x`` ``[rows, heads * head_dim]``, whose sum is ``_rotate``'s
    (the same products of the same elements; the 2-D operands need no broadcasting and gather in one pass)."""
    return x * cos, x.index_select(1, wide_swap) * signed_sin


def _wide(x: torch.Tensor, heads: int) -> torch.Tensor:
    """``x`` ``[..., head_dim]`` (one row per row or position) as ``[rows, heads * head_dim]``, repeated per head."""
    return x.reshape(x.shape[0], -1).repeat(1, heads)


def global_hooks() -> bool:
    """Whether forward hooks are registered for every module (they expect module calls, not direct kernels)."""
    from torch.nn.modules import module as torch_module

    return bool(torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks)


def _norm(norm: nn.Module, eps: float, like: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """Llama's RMSNorm over ``norm``'s weight for inputs like ``like`` (dtype and device): on the CPU as
    :func:`cpu_rms_norm`, elsewhere ``_rms_norm``, in fp32 the fused kernel with its arguments bound."""
    eps = getattr(norm, "variance_epsilon", eps)
    if like.device.type == "cpu":
        return cpu_rms_norm(norm.weight, eps, like.dtype)
    if like.dtype == torch.float32 and norm.weight.dtype == torch.float32:
        return partial(torch.rms_norm, normalized_shape=tuple(norm.weight.shape), weight=norm.weight, eps=eps)
    return partial(_rms_norm, norm=norm, eps=eps)


def cpu_rms_norm(weight: torch.Tensor, eps: float, dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    """Llama's RMSNorm (``weight * (x * rsqrt(mean(x ** 2) + eps))``, in fp32 and cast back before the weight) for
    CPU inputs of ``dtype``, bit for bit, in a third less time than ``torch.rms_norm``.

    The CPU's ``torch.rms_norm`` and transformers' ``LlamaRMSNorm`` run the same operators: ``x * x`` (``pow(2)``),
    ``sum`` then ``div_`` by the size (``mean``), ``add_`` of ``eps`` as a float, ``rsqrt``, then two products. Here
    those kernels run without ``rms_norm``'s dispatch, the scalars ``mean`` and ``add_`` wrap (and copy) on every
    call, or new tensors where one can be overwritten: ``addcdiv`` computes ``eps + sum / size`` in one pass, the
    same two roundings, and the products are commutative.
    """
    epsilon = torch.tensor(eps, dtype=torch.float32, device=weight.device)  # as add_ rounds it: to the fp32 sum's dtype
    size = torch.tensor(weight.shape[-1], dtype=torch.float32, device=weight.device)
    weight_in_place = weight.dtype == dtype  # else ``weight * x`` promotes, to a dtype the input's buffer lacks

    def fp32(x: torch.Tensor) -> torch.Tensor:
        squares = torch.sum(x * x, -1, keepdim=True)
        scale = torch.addcdiv(epsilon, squares, size, out=squares).rsqrt_()
        return torch.mul(x, scale).mul_(weight) if weight_in_place else weight * torch.mul(x, scale)

    def upcast(x: torch.Tensor) -> torch.Tensor:
        wide = x.float()
        squares = torch.sum(wide * wide, -1, keepdim=True)
        scale = torch.addcdiv(epsilon, squares, size, out=squares).rsqrt_()
        normed = torch.mul(wide, scale).to(x.dtype)
        return normed.mul_(weight) if weight_in_place else weight * normed

    return fp32 if dtype == torch.float32 else upcast


def _rms_norm(x: torch.Tensor, norm: nn.Module, eps: float) -> torch.Tensor:
    """Llama's RMSNorm (in fp32, cast back, then scaled by the weight) as one fused kernel."""
    eps = getattr(norm, "variance_epsilon", eps)
    if x.dtype == torch.float32 and norm.weight.dtype == torch.float32:
        return F.rms_norm(x, x.shape[-1:], weight=norm.weight, eps=eps)
    return norm.weight * F.rms_norm(x.float(), x.shape[-1:], eps=eps).to(x.dtype)


def plain_linear(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``module(x)``; a plain ``nn.Linear`` without hooks is called as ``F.linear``, saving the module call's
    Python work on every one of a layer's seven projections (adapter layers and hooked modules run as modules)."""
    if type(module) is nn.Linear and not (module._forward_hooks or module._forward_pre_hooks):
        return F.linear(x, module.weight, module.bias)
    return module(x)
