"""A Llama-shaped forward over rows that repeat a prompt (a GRPO group's G completions of one prompt): each distinct
prompt goes through the layers once, and its keys and values serve every row that continues it.

The transformers forward (and TRL's) runs prompt + completion for each of a group's rows, so the prompt's tokens are
computed G times forward and again G times backward. Here the prompt of a run of identical rows is computed once,
and its gradient gathers what each continuation sends back through the prompt's keys and values. Every completion
position sees the same keys in the same order as in the full forward: the numbers are those of the transformers
forward up to float32 rounding (its projections and sdpa are called with fewer rows). The model's own modules run
(embeddings, norms, projections, MLPs, the head: LoRA adapters, quantized weights and their hooks are the ones used);
only the attention's wiring is written here, for the architectures ``honing.models.lean_decoder`` decodes. Anything
else returns None and the caller runs the plain forward: DDP (its reducer hooks the root forward), sharded weights
(FSDP2's all-gathers hook the root too), hooks on a layer or its attention, checkpointed or compiled blocks, and
attention dropout in training.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from honing.models.lean_decoder import LLAMA_SHAPED, global_hooks, is_sharded, uses_sliding_window
from honing.models.wrappers import transformers_model


def shared_prompt_forward(
    model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, completion_width: int
) -> CausalLMOutputWithPast | None:
    """The logits of the last ``completion_width + 1`` positions (what ``logits_to_keep`` gives), the columns
    before them (the prompts) computed once per run of consecutive rows that hold the same ones; None when no two
    rows share their prompt or the model is not one this forward serves exactly."""
    prompt_width = input_ids.shape[1] - completion_width
    if prompt_width < 1 or completion_width < 1 or input_ids.shape[0] < 2:
        return None
    lm = _served_model(model)
    if lm is None:
        return None
    groups = prompt_groups(input_ids[:, :prompt_width], attention_mask[:, :prompt_width])
    if groups is None:
        return None
    group_of_row, first_rows = groups
    return CausalLMOutputWithPast(
        logits=_SharedPromptForward(lm).logits(input_ids, attention_mask, prompt_width, group_of_row, first_rows)
    )


def prompt_groups(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(group of each row, first row of each group)`` for runs of consecutive rows with equal prompt columns
    (ids and mask); None when every row's prompt differs from its neighbour's (nothing to share)."""
    rows = torch.cat([prompt_ids, prompt_mask.to(prompt_ids.dtype)], dim=1)
    same_as_previous = (rows[1:] == rows[:-1]).all(dim=1)
    if not bool(same_as_previous.any()):
        return None
    starts = torch.cat([same_as_previous.new_ones(1), ~same_as_previous])
    return starts.long().cumsum(0) - 1, starts.nonzero().squeeze(1)


def _served_model(model: nn.Module) -> nn.Module | None:
    """The transformers model when this file computes its forward exactly as its own modules would, else None."""
    if isinstance(model, nn.parallel.DistributedDataParallel):
        return None
    lm = transformers_model(model)
    config = getattr(lm, "config", None)
    if config is None or getattr(config, "model_type", None) not in LLAMA_SHAPED or uses_sliding_window(config):
        return None
    decoder = getattr(lm, "model", None)
    if decoder is None or not all(hasattr(decoder, n) for n in ("embed_tokens", "layers", "norm", "rotary_emb")):
        return None
    if lm.training and getattr(config, "attention_dropout", 0.0):
        return None
    if _checkpointing(lm) or global_hooks():
        return None
    layers = list(decoder.layers)[: config.num_hidden_layers]
    # the modules whose forward this file replaces: a hook, a wrapper or a compiled call on them would be skipped
    replaced = [model, lm, decoder, *layers, *(getattr(layer, "self_attn", None) for layer in layers)]
    if any(module is None or _hooked(module) for module in replaced):
        return None
    if not all(type(layer).__name__.endswith("DecoderLayer") for layer in layers):
        return None  # e.g. torch's checkpoint or offload wrappers around a block
    if any(is_sharded(p) for p in lm.parameters()):
        return None
    return lm


def _checkpointing(lm: nn.Module) -> bool:
    """Whether transformers' own gradient checkpointing is on (its layers then run through its checkpoint call)."""
    # transformers 5 renamed the property (the old name warns); read the one the class has
    name = (
        "is_activation_checkpointing"
        if hasattr(type(lm), "is_activation_checkpointing")
        else "is_gradient_checkpointing"
    )
    return bool(getattr(lm, name, False))


def _hooked(module: nn.Module) -> bool:
    compiled = getattr(module, "_compiled_call_impl", None) is not None
    return compiled or bool(module._forward_hooks or module._forward_pre_hooks)


class _SharedPromptForward:
    """One forward of the decoder: the distinct prompts, then every row's completion over its prompt's keys."""

    def __init__(self, lm: nn.Module):
        config = lm.config
        self.lm, self.decoder = lm, lm.model
        self.layers = list(self.decoder.layers)[: config.num_hidden_layers]
        heads = config.num_attention_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        self.gqa = (getattr(config, "num_key_value_heads", None) or heads) != heads

    def logits(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        prompt_width: int,
        group_of_row: torch.Tensor,
        first_rows: torch.Tensor,
    ) -> torch.Tensor:
        """``[rows, completion width + 1, vocab]``: the last prompt position's logits and each completion token's."""
        device = input_ids.device
        valid = attention_mask.bool()
        prompt_valid = valid[first_rows, :prompt_width]
        width = input_ids.shape[1]
        # transformers' positions when none are given: the column index, padding included
        positions = torch.arange(width, device=device)[None]
        causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
        # a padding query sees itself too: a row with no visible key would give NaN, which the keys carry on
        prompt_mask = causal[:prompt_width, :prompt_width] & prompt_valid[:, None, None, :]
        prompt_mask = prompt_mask | torch.eye(prompt_width, dtype=torch.bool, device=device)
        completion_mask = causal[prompt_width:] & valid[:, None, None, :]
        prompt_hidden = self.decoder.embed_tokens(input_ids[first_rows, :prompt_width])
        completion_hidden = self.decoder.embed_tokens(input_ids[:, prompt_width:])
        # one table for every column: a RoPE whose frequencies follow the length (dynamic NTK) sees the full width
        cos, sin = self.decoder.rotary_emb(completion_hidden, positions)
        prompt_rope = cos[:, :prompt_width], sin[:, :prompt_width]
        completion_rope = cos[:, prompt_width:], sin[:, prompt_width:]
        for layer in self.layers:
            attention = layer.self_attn
            prompt_out, (keys, values) = self._attend(attention, layer, prompt_hidden, prompt_rope, prompt_mask)
            past = keys.index_select(0, group_of_row), values.index_select(0, group_of_row)
            completion_out, _ = self._attend(
                attention, layer, completion_hidden, completion_rope, completion_mask, past
            )
            prompt_hidden = self._mlp(layer, prompt_hidden + prompt_out)
            completion_hidden = self._mlp(layer, completion_hidden + completion_out)
        last_prompt = prompt_hidden[:, -1:].index_select(0, group_of_row)
        hidden = torch.cat([last_prompt, completion_hidden], dim=1)
        return self.lm.lm_head(self.decoder.norm(hidden))

    @staticmethod
    def _mlp(layer: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
        return hidden + layer.mlp(layer.post_attention_layernorm(hidden))

    def _attend(
        self,
        attention: nn.Module,
        layer: nn.Module,
        hidden: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor,
        past: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """The attention block's output for ``hidden`` (keys: ``past``'s, then its own), and its own rotated keys
        and values, as transformers' attention computes them."""
        normed = layer.input_layernorm(hidden)
        shape = (*hidden.shape[:2], -1, self.head_dim)
        query = attention.q_proj(normed).view(shape)
        key = attention.k_proj(normed).view(shape)
        if hasattr(attention, "q_norm"):  # Qwen3: RMSNorm over each head before the rotation
            query, key = attention.q_norm(query), attention.k_norm(key)
        query, key = query.transpose(1, 2), key.transpose(1, 2)
        value = attention.v_proj(normed).view(shape).transpose(1, 2)
        query, key = apply_rotary_pos_emb(query, key, *rope)  # every Llama-shaped family's own formula
        keys, values = key, value
        if past is not None:
            keys, values = torch.cat([past[0], key], dim=2), torch.cat([past[1], value], dim=2)
        out = F.scaled_dot_product_attention(
            query, keys, values, attn_mask=mask, scale=attention.scaling, enable_gqa=self.gqa
        )
        out = out.transpose(1, 2).reshape(*hidden.shape[:2], -1).contiguous()
        return attention.o_proj(out), (key, value)
