"""Tiny chat models saved as Hugging Face folders, built in a second and trained on nothing: honing's byte-level
tokenizer with the ChatML template (what an SFT run exports), over a random Llama or one scripted to answer "hi"."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SCRIPTED_ANSWER = "hi"


def chat_tokenizer():
    """honing's byte-level tokenizer with the ChatML template and its special tokens."""
    from honing.data.chat.conversation import ensure_special_tokens, resolve_chat_template
    from honing.data.tokenizer import build_tokenizer

    tokenizer = build_tokenizer("byte")
    ensure_special_tokens(tokenizer, "chatml")
    tokenizer.chat_template = resolve_chat_template(tokenizer, "chatml")
    return tokenizer


def tiny_chat_llama(vocab_size: int, seed: int = 0, **overrides) -> LlamaForCausalLM:
    """A 2-layer Llama with grouped-query attention (4 heads, 2 key/value heads), seeded."""
    torch.manual_seed(seed)
    values = dict(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=256,
    )
    return LlamaForCausalLM(LlamaConfig(**{**values, **overrides})).eval()


def save_chat_model(folder: Path, *, scripted: bool = False, seed: int = 0) -> Path:
    """A random chat model in ``folder``; ``scripted``: its greedy answer to any ChatML prompt is
    :data:`SCRIPTED_ANSWER` then ``<|im_end|>``."""
    tokenizer = chat_tokenizer()
    model = tiny_chat_llama(len(tokenizer), seed)
    if scripted:
        script_answer(model, tokenizer)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@torch.no_grad()
def script_answer(model: LlamaForCausalLM, tokenizer) -> None:
    """Make ``model`` a bigram model (its layers add nothing to the residual stream, so each next token depends only
    on the last one) whose greedy chain from the generation prompt's last token ("\\n") spells the answer and ends
    the turn."""
    for layer in model.model.layers:
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
    ids = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(char))[0] for char in "\n" + SCRIPTED_ANSWER]
    ids.append(tokenizer.convert_tokens_to_ids("<|im_end|>"))
    for current, following in zip(ids, ids[1:]):
        hidden = model.model.norm(model.model.embed_tokens.weight[current])
        # random rows score about 0.1 against a hidden state; this one scores hundreds
        model.lm_head.weight[following] += 20 * hidden / hidden.norm()
