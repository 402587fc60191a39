"""Sampling from a vision-language model: the prompts' pixel inputs go into the first forward (which fills the KV
cache with the image tokens' states), and each new token takes the position the model's own full forward gives it.

Qwen-VL families place tokens with 3-D M-RoPE: image tokens by their patch grid, text after an image from the
image's largest grid side on. The prompt's positions come from the model's ``get_rope_index`` (as its forward
computes them, left padding skipped), and a completion token's is the text position plus the row's rope delta, as
transformers' generate continues. The training forward that scores the completions (``input_ids`` and pixel inputs,
no positions) computes the same positions, so sampling and scoring see one sequence. Other families place tokens
on one axis: the text positions ``TransformersDecoder`` gives every model.

The image placeholder tokens are never sampled: the scoring forward would read a sampled one as an image slot with
no image features behind it (transformers refuses the mismatch). Sampling leaves them out as top-k leaves out the
tail: the scored log-probabilities are the model's own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from honing.models.generation import TransformersDecoder
from honing.models.wrappers import transformers_model


def rope_index_owner(model: torch.nn.Module) -> torch.nn.Module | None:
    """The module with Qwen-VL's ``get_rope_index`` (the inner ``model`` of ``...ForConditionalGeneration``), or
    None for a family without 3-D positions."""
    base = transformers_model(model)
    for candidate in (base, getattr(base, "model", None)):
        if candidate is not None and callable(getattr(candidate, "get_rope_index", None)):
            return candidate
    return None


class VisionDecoder(TransformersDecoder):
    """``TransformersDecoder`` whose prefill also takes the prompts' pixel inputs (``image_inputs``: the
    processor's tensors for the rows together, per-token ones as wide as the prompts), and which never samples
    ``blocked_token_ids`` (the image placeholders)."""

    def __init__(
        self,
        model: torch.nn.Module,
        image_inputs: Mapping[str, torch.Tensor],
        blocked_token_ids: Sequence[int] = (),
    ):
        super().__init__(model)
        self.image_inputs = dict(image_inputs)
        self.blocked_token_ids = sorted(set(blocked_token_ids))
        self.rope_delta: torch.Tensor | None = None  # [rows, 1] where the family has 3-D positions

    def prefill(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int, shared_prefix: int = 0
    ) -> torch.Tensor:
        """Run the left-padded prompts with their pixel inputs; the next-token logits ``[rows, vocab]``."""
        from transformers import DynamicCache

        text = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 1)
        self.mask = attention_mask.long()
        self.position = text[:, -1:]
        self.cache = DynamicCache(config=getattr(self.model, "config", None))
        owner = rope_index_owner(self.model)
        positions = text
        if owner is not None and "image_grid_thw" in self.image_inputs and "mm_token_type_ids" in self.image_inputs:
            rope, self.rope_delta = owner.get_rope_index(
                input_ids,
                mm_token_type_ids=self.image_inputs["mm_token_type_ids"],
                image_grid_thw=self.image_inputs["image_grid_thw"],
                attention_mask=attention_mask,
            )
            positions = rope.to(text.dtype)  # [3, rows, len], as the scoring forward computes them
        return self._forward(input_ids, positions, logits_to_keep=1, **self.image_inputs)

    def step(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Append one token per row (no pixel inputs: the images are in the cache)."""
        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], dim=1)
        self.position = self.position + 1
        positions = self.position
        if self.rope_delta is not None:
            positions = (self.position + self.rope_delta.to(self.position.device))[None].expand(3, -1, -1)
        return self._forward(token_ids[:, None], positions)

    def _forward(self, input_ids: torch.Tensor, positions: torch.Tensor, **kwargs: object) -> torch.Tensor:
        logits = super()._forward(input_ids, positions, **kwargs)
        if self.blocked_token_ids:
            logits[:, self.blocked_token_ids] = float("-inf")
        return logits
