"""Attention over preference pairs packed into one row without padding.

A DPO micro-batch holds each pair as ``prompt | chosen | rejected``; right-padded to its longest pair, about a
third of a batch of real conversations is padding, and a dense 4D mask makes attention cost the full width
squared. Packed, the micro-batch is one row of its real tokens only, and attention runs pair by pair with
causal kernels: ``prompt | chosen`` is plain causal, and the rejected reply's queries see the prompt and their
own past (sdpa's bottom-right causal mask), never the chosen reply. The numbers are the dense mask's (up to the
order of float sums); the work is that of the real tokens.

:func:`enable_pair_attention` registers, for the model's own implementation (sdpa or eager), one that does
this when a forward passes the pairs' lengths as ``pair_segments`` (transformers hands a forward's extra
keywords down to the attention function of every layer) and is the model's own otherwise, so generation and
activation checkpointing's recomputation run as before. The implementation's name is not saved with the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from honing.models.attention_choice import attention_kernel
from honing.models.wrappers import transformers_model

#: the attention implementations the packed path stands in for (those that take a dense 4D mask on any device)
REPLACEABLE = ("sdpa", "eager")
PREFIX = "honing_pairs_"


def pair_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    pair_segments: Sequence[tuple[int, int, int]],
    scaling: float | None = None,
    dropout: float = 0.0,
) -> tuple[torch.Tensor, None]:
    """Attention of ``query`` ``[1, heads, tokens, head_dim]`` over packed pairs whose (prompt, chosen,
    rejected) lengths are ``pair_segments``; returns ``[1, tokens, heads, head_dim]`` as transformers expects."""
    gqa = key.shape[1] != query.shape[1]
    dropout = dropout if module.training else 0.0
    parts = []
    start = 0
    for prompt, chosen, rejected in pair_segments:
        both = prompt + chosen
        q, k, v = (t[:, :, start : start + both + rejected] for t in (query, key, value))
        start += both + rejected
        if both:
            parts.append(_sdpa(q[:, :, :both], k[:, :, :both], v[:, :, :both], None, scaling, dropout, gqa))
        if rejected:
            # the rejected reply's keys follow the prompt's directly: the chosen reply is left out
            keys = torch.cat([k[:, :, :prompt], k[:, :, both:]], dim=2)
            values = torch.cat([v[:, :, :prompt], v[:, :, both:]], dim=2)
            sees = torch.ones(rejected, prompt + rejected, dtype=torch.bool, device=q.device).tril(prompt)
            parts.append(_sdpa(q[:, :, both:], keys, values, sees, scaling, dropout, gqa))
    if start != query.shape[2]:
        raise RuntimeError(f"pair_segments cover {start} tokens, the packed row holds {query.shape[2]}")
    return torch.cat(parts, dim=2).transpose(1, 2).contiguous(), None


def _sdpa(q, k, v, mask, scaling, dropout, gqa) -> torch.Tensor:  # type: ignore[no-untyped-def]
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=mask is None, dropout_p=dropout, scale=scaling, enable_gqa=gqa
    )


def _dispatching(base: str) -> tuple[Any, Any]:
    """The attention and mask functions registered for ``base``: pairs when the forward passed
    ``pair_segments`` (a packed DPO forward), ``base`` itself otherwise (generation, evaluation samples)."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    base_mask = ALL_MASK_ATTENTION_FUNCTIONS[base]

    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):  # type: ignore[no-untyped-def]
        segments = kwargs.pop("pair_segments", None)
        if segments is None:
            base_attention = attention_kernel(module, base)
            return base_attention(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
        return pair_attention_forward(module, query, key, value, segments, scaling=scaling, dropout=dropout)

    return attention, base_mask


def enable_pair_attention(model: nn.Module) -> bool:
    """Let ``model`` attend over packed pairs (its forwards without ``pair_segments`` are unchanged); False when
    its attention implementation is not one the pair attention stands in for (flash attention, say)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    config = getattr(transformers_model(model), "config", None)
    current = getattr(config, "_attn_implementation", None)
    if isinstance(current, str) and current.startswith(PREFIX):
        return True
    if current not in REPLACEABLE:
        return False
    name = PREFIX + current
    if name not in AttentionInterface._global_mapping:
        attention, mask = _dispatching(current)
        AttentionInterface.register(name, attention)
        ALL_MASK_ATTENTION_FUNCTIONS.register(name, mask)
    config._attn_implementation = name
    return True
