"""Generation between training steps: one place for samples, the generation eval and (later) GRPO rollouts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from honing.models.wrappers import unwrap_model

# the end-of-turn tokens of the common chat templates (ChatML, Llama-3, Phi-3)
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end|>")


def generate(
    model: torch.nn.Module, input_ids: torch.Tensor, *, pad_token_id: int | None, **generate_kwargs: Any
) -> torch.Tensor:
    """``model.generate`` in eval mode without gradients, the model's mode restored afterwards.

    Under DDP the wrapped model generates on its own; under FSDP2 every rank must call this (the callbacks
    do), and transformers keeps their forwards in step (synced_gpus) so no rank waits in an all-gather.
    """
    inner = unwrap_model(model)
    was_training = inner.training
    inner.eval()
    try:
        with torch.no_grad():
            return inner.generate(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                pad_token_id=pad_token_id,
                **generate_kwargs,
            )
    finally:
        inner.train(was_training)


def end_of_turn_ids(tokenizer: Any) -> list[int]:
    """Token ids that end an assistant turn in the common chat templates, where the tokenizer has them."""
    ids = [tokenizer.convert_tokens_to_ids(token) for token in END_OF_TURN_TOKENS]
    return [i for i in ids if i is not None and i != tokenizer.unk_token_id]


def sampling_kwargs(
    *, max_new_tokens: int, temperature: float, top_k: int | None = 50, stop_token_ids: Sequence[int] = ()
) -> dict[str, Any]:
    """``generate`` keyword arguments: greedy at temperature 0, else sampling with ``top_k``."""
    kwargs: dict[str, Any] = {
        "max_new_tokens": max_new_tokens,
        "do_sample": temperature > 0,
        "temperature": temperature or None,
        "top_k": top_k if temperature > 0 else None,
    }
    if stop_token_ids:
        kwargs["eos_token_id"] = sorted(set(stop_token_ids))
    return kwargs
