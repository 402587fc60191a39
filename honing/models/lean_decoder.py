"""A lean KV-cached decoder for Llama-shaped models, for rollouts: the transformers forward's numbers with a
fraction of its per-token Python work.

A GRPO step decodes one token at a time for every completion, and at rollout batch sizes each of those forwards
is small: the transformers forward spends most of its time building masks, growing its cache by concatenation
and dispatching a hundred small operators a layer. This decoder runs the model's own modules (so LoRA adapters,
biases and the checkpoint's weights are the ones used) over a cache allocated once for the whole rollout, with a
padding mask kept as one boolean buffer, fused RMSNorm and sdpa. It covers the architectures whose layer is
exactly Llama's (Llama, Mistral without a sliding window, Qwen2, Qwen3 with its per-head norms); anything else,
and sharded (FSDP2) models, whose forward must go through the root module's all-gather, return ``None`` from
:func:`lean_decoder` and decode with transformers.
"""

from __future__ import annotations

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
    if getattr(config, "hidden_act", None) != "silu" or _uses_sliding_window(config):
        return None
    decoder = getattr(lm, "model", None)
    needed = ("embed_tokens", "layers", "norm", "rotary_emb")
    if decoder is None or not all(hasattr(decoder, name) for name in needed) or not hasattr(lm, "lm_head"):
        return None
    if _global_hooks() or any(_is_sharded(p) for p in lm.parameters()):
        return None  # hooks on every module expect module calls; sharded weights need the root's all-gather
    return LeanDecoder(lm)


def _uses_sliding_window(config: PretrainedConfig) -> bool:
    if getattr(config, "model_type", None) in ("qwen2", "qwen3"):
        return bool(getattr(config, "use_sliding_window", False))
    return getattr(config, "sliding_window", None) is not None


def _is_sharded(parameter: torch.Tensor) -> bool:
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
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.valid = torch.empty(0, dtype=torch.bool)
        self.length = 0
        self.position = torch.empty(0, dtype=torch.long)

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
        shape = (rows, self.kv_heads, capacity, self.head_dim)
        self.keys = [hidden.new_zeros(shape) for _ in self.layers]
        self.values = [hidden.new_zeros(shape) for _ in self.layers]
        self.valid = torch.zeros(rows, capacity, dtype=torch.bool, device=device)
        self.valid[:, :length] = attention_mask.bool()
        # positions count real tokens only, as transformers' generate sets them for left-padded rows
        positions = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 1)
        causal = torch.ones(length, length, dtype=torch.bool, device=device).tril()
        # a padding query sees itself too: a row with no visible key would give NaN that then reaches real rows
        mask = (causal & self.valid[:, None, None, :length]) | torch.eye(length, dtype=torch.bool, device=device)
        self.length = length
        self.position = positions[:, -1:]
        shared = min(shared_prefix, length - 1) if rows > 1 else 0  # the last column's logits are every row's own
        if shared > 0:
            caches = self.keys, self.values
            self.keys, self.values = [k[:1] for k in caches[0]], [v[:1] for v in caches[1]]  # row 0's views
            prefix = self.decoder.embed_tokens(input_ids[:1, :shared])
            self._forward(prefix, positions[:1, :shared], mask[:1, :, :shared, :shared], 0)
            self.keys, self.values = caches
            for cache in (*self.keys, *self.values):
                cache[1:, :, :shared] = cache[:1, :, :shared]
        hidden = self.decoder.embed_tokens(input_ids[:, shared:])
        return self._forward(hidden, positions[:, shared:], mask[:, :, shared:], shared)

    def step(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Append one token per row; the next-token logits ``[rows, vocab]``."""
        if self.length >= self.valid.shape[1]:
            raise RuntimeError(f"the decode cache holds {self.length} tokens; prefill sized it for no more")
        self.valid[:, self.length] = True
        self.position = self.position + 1
        start = self.length
        self.length += 1
        hidden = self.decoder.embed_tokens(token_ids[:, None])
        return self._forward(hidden, self.position, self.valid[:, None, None, : self.length], start)

    def _forward(self, hidden: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, start: int) -> torch.Tensor:
        cos, sin = self.decoder.rotary_emb(hidden, positions)
        cos, sin = cos[:, None], sin[:, None]  # [rows, 1, tokens, head_dim]: one for every head
        half = self.head_dim // 2
        # rotate_half(x) * sin == swap_halves(x) * signed_sin, with the sign folded in once for every layer
        signed_sin = torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)
        end = start + hidden.shape[1]
        for index, layer in enumerate(self.layers):
            hidden = hidden + self._attention(layer, hidden, cos, signed_sin, mask, index, start, end)
            mlp = layer.mlp
            normed = _rms_norm(hidden, layer.post_attention_layernorm, self.eps)
            hidden = hidden + _linear(
                mlp.down_proj, F.silu(_linear(mlp.gate_proj, normed)) * _linear(mlp.up_proj, normed)
            )
        last = _rms_norm(hidden[:, -1], self.decoder.norm, self.eps)
        return _linear(self.lm.lm_head, last)

    def _attention(
        self,
        layer: nn.Module,
        hidden: torch.Tensor,
        cos: torch.Tensor,
        signed_sin: torch.Tensor,
        mask: torch.Tensor,
        index: int,
        start: int,
        end: int,
    ) -> torch.Tensor:
        attention = layer.self_attn
        rows, tokens, _ = hidden.shape
        normed = _rms_norm(hidden, layer.input_layernorm, self.eps)
        query = _linear(attention.q_proj, normed).view(rows, tokens, self.heads, self.head_dim)
        key = _linear(attention.k_proj, normed).view(rows, tokens, self.kv_heads, self.head_dim)
        value = _linear(attention.v_proj, normed).view(rows, tokens, self.kv_heads, self.head_dim)
        if hasattr(attention, "q_norm"):  # Qwen3: RMSNorm over each head before the rotation
            query = _rms_norm(query, attention.q_norm, self.eps)
            key = _rms_norm(key, attention.k_norm, self.eps)
        query = _rotate(query.transpose(1, 2), cos, signed_sin)
        self.keys[index][:, :, start:end] = _rotate(key.transpose(1, 2), cos, signed_sin)
        self.values[index][:, :, start:end] = value.transpose(1, 2)
        out = F.scaled_dot_product_attention(
            query,
            self.keys[index][:, :, :end],
            self.values[index][:, :, :end],
            attn_mask=mask,
            scale=attention.scaling,
            enable_gqa=self.kv_heads != self.heads,
        )
        return _linear(attention.o_proj, out.transpose(1, 2).reshape(rows, tokens, self.heads * self.head_dim))


def _rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of ``x`` ``[rows, heads, tokens, head_dim]`` as transformers' ``apply_rotary_pos_emb``."""
    swapped = x.unflatten(-1, (2, -1)).flip(-2).flatten(-2)
    return x * cos + swapped * signed_sin


def _global_hooks() -> bool:
    from torch.nn.modules import module as torch_module

    return bool(torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks)


def _rms_norm(x: torch.Tensor, norm: nn.Module, eps: float) -> torch.Tensor:
    """Llama's RMSNorm (in fp32, cast back, then scaled by the weight) as one fused kernel."""
    eps = getattr(norm, "variance_epsilon", eps)
    if x.dtype == torch.float32 and norm.weight.dtype == torch.float32:
        return F.rms_norm(x, x.shape[-1:], weight=norm.weight, eps=eps)
    return norm.weight * F.rms_norm(x.float(), x.shape[-1:], eps=eps).to(x.dtype)


def _linear(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``module(x)``; a plain ``nn.Linear`` without hooks is called as ``F.linear``, saving the module call's
    Python work on every one of a layer's seven projections (adapter layers and hooked modules run as modules)."""
    if type(module) is nn.Linear and not (module._forward_hooks or module._forward_pre_hooks):
        return F.linear(x, module.weight, module.bias)
    return module(x)
