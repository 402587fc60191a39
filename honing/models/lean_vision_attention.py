"""The Qwen-VL vision towers' attention with the images of one length in one sdpa call: the same bits as
transformers' per-image loop, in a fraction of the calls.

Without flash attention, transformers' Qwen2-VL, Qwen2.5-VL and Qwen3-VL vision attention splits the packed patches
at ``cu_seqlens`` and runs sdpa once per image (Qwen2.5-VL: once per window), then concatenates: a batch of 8
images costs 8 sdpa calls, 24 splits and a cat per block. Images of the same number of patches are independent
rows of one attention: sdpa computes each (image, head) alone, so one call over them stacked as a batch gives
every output element the same operations in the same order (checked forward and backward in the tests). Lengths
that differ are grouped by length, a call per group, the outputs put back in the images' order.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

# the vision attention classes whose forward is the per-image sdpa loop this file batches
BATCHED_CLASSES = frozenset({"VisionAttention", "Qwen2_5_VLVisionAttention", "Qwen3VLVisionAttention"})
FAMILY_MODULES = ("transformers.models.qwen2_vl.", "transformers.models.qwen2_5_vl.", "transformers.models.qwen3_vl.")


def lean_vision_attention(model: nn.Module) -> list[nn.Module]:
    """Give every Qwen-VL vision attention module in ``model`` the batched forward; the modules it took."""
    taken = []
    for module in model.modules():
        cls = type(module)
        if cls.__name__ in BATCHED_CLASSES and cls.__module__.startswith(FAMILY_MODULES):
            module.forward = types.MethodType(_batched_forward, module)
            taken.append(module)
    return taken


def _batched_forward(
    self: nn.Module,
    hidden_states: torch.Tensor,
    cu_seqlens: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
    max_seqlen: int | None = None,
    **kwargs: Any,
) -> torch.Tensor:
    if self.config._attn_implementation != "sdpa" or kwargs.get("output_attentions") or torch.compiler.is_compiling():
        return type(self).forward(self, hidden_states, cu_seqlens, position_embeddings, max_seqlen, **kwargs)
    seq_length = hidden_states.shape[0]
    query, key, value = self.qkv(hidden_states).reshape(seq_length, 3, self.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
    cos, sin = position_embeddings
    rotate = sys.modules[type(self).__module__].apply_rotary_pos_emb_vision  # the family's own
    query, key = rotate(query, key, cos, sin)
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
    dropout = 0.0 if not self.training else self.attention_dropout
    if len(set(lengths)) == 1:  # every image one length: [images, heads, patches, head_dim] views
        shape = (len(lengths), lengths[0], self.num_heads, -1)
        query, key, value = (x.view(shape).transpose(1, 2) for x in (query, key, value))
        out = F.scaled_dot_product_attention(query, key, value, dropout_p=dropout, scale=self.scaling)
        out = out.transpose(1, 2).reshape(seq_length, -1)
    else:
        out = _grouped_attention(self, query, key, value, lengths, dropout)
    return self.proj(out)


def _grouped_attention(
    self: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, lengths: list[int], dropout: float
) -> torch.Tensor:
    """Attention of ``[patches, heads, head_dim]`` inputs within each image of ``lengths``, one sdpa call per
    distinct length; ``[patches, heads * head_dim]``."""
    chunks = [x.split(lengths, dim=0) for x in (query, key, value)]
    outputs: list[torch.Tensor | None] = [None] * len(lengths)
    for length in dict.fromkeys(lengths):
        members = [index for index, each in enumerate(lengths) if each == length]
        stacked = [torch.stack([parts[i] for i in members]).transpose(1, 2) for parts in chunks]
        out = F.scaled_dot_product_attention(*stacked, dropout_p=dropout, scale=self.scaling).transpose(1, 2)
        for index, image in zip(members, out.unbind(0), strict=True):
            outputs[index] = image
    return torch.cat(outputs, dim=0).reshape(query.shape[0], -1)  # type: ignore[arg-type]
