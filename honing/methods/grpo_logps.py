"""The per-token log-probabilities of a rollout's completions under a model: the policy's (with gradients), the
old policy's and the reference's, as TRL scores them (``input_ids`` and ``attention_mask``, the logits of the
completion positions only, at the sampling temperature)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

import torch
from transformers.utils import ModelOutput

from honing import chunked_ce
from honing.data.collate import stack_collate
from honing.losses import token_logps
from honing.models.output_head import forward_with_head
from honing.models.shared_prompt_forward import shared_prompt_forward
from honing.models.wrappers import is_lora, unwrap_model

Micro = dict[str, torch.Tensor]


def no_inputs(micro: Micro) -> dict[str, torch.Tensor]:
    """A text rollout's forward takes nothing besides ids and mask."""
    return {}


class CompletionLogps:
    """Scores completions: ``logps(model, micro)``; ``reference(policy, rollouts)`` for the KL's reference (the
    frozen copy, or the policy with its LoRA adapters off), over micro-batches of ``micro_width`` completions."""

    def __init__(
        self,
        *,
        temperature: float,
        chunked: bool,
        autocast: Callable[[], AbstractContextManager],
        micro_width: int,
        rollout_keys: Sequence[str],
        reference_model: torch.nn.Module | None = None,
        model_inputs: Callable[[Micro], dict[str, torch.Tensor]] = no_inputs,
        shared_prompts: bool = False,
    ):
        self.temperature, self.chunked, self.autocast = temperature, chunked, autocast
        self.micro_width, self.rollout_keys = micro_width, tuple(rollout_keys)
        self.reference_model = reference_model
        # the forward's inputs besides ids and mask for a micro-batch (a vision rollout's pixels)
        self.model_inputs = model_inputs
        # each run of rows with the same prompt (a group) computes it once (honing.models.shared_prompt_forward)
        self.shared_prompts = shared_prompts

    def __call__(self, model: torch.nn.Module, micro: Micro) -> torch.Tensor:
        """Per-token log-probabilities of the completion tokens at the sampling temperature. The chunked head
        computes them only where ``completion_mask`` is set (0 elsewhere, where the loss never looks)."""
        completion_ids = micro["completion_ids"]
        run_forward = self.forward(model, micro)
        if self.chunked:
            logps = forward_with_head(
                model,
                lambda hidden, weight, bias: chunked_ce.token_logps(
                    hidden[:, :-1], weight, bias, completion_ids, micro["completion_mask"], self.temperature
                ),
                run_forward,
            )
            if logps is not None:
                return logps
        return token_logps(run_forward().logits[:, :-1], completion_ids, self.temperature)

    def forward(self, model: torch.nn.Module, micro: Micro) -> Callable[[], ModelOutput]:
        """The forward over a rollout micro-batch that keeps the logits of the completion positions (and the one
        before them), as a function to call."""

        def run_forward() -> ModelOutput:
            with self.autocast():
                inputs = self.model_inputs(micro)
                if self.shared_prompts and not inputs:  # a vision rollout's pixels go through the plain forward
                    ids, mask, width = micro["input_ids"], micro["attention_mask"], micro["completion_ids"].shape[1]
                    shared = shared_prompt_forward(model, ids, mask, width)
                    if shared is not None:
                        return shared
                return model(
                    input_ids=micro["input_ids"],
                    attention_mask=micro["attention_mask"],
                    use_cache=False,
                    logits_to_keep=micro["completion_ids"].shape[1] + 1,
                    **inputs,
                )

        return run_forward

    @torch.no_grad()
    def reference(self, policy: torch.nn.Module, rollouts: Micro) -> torch.Tensor:
        """The reference model's completion log-probs: the frozen copy, or ``policy`` with its adapters off."""
        parts = []
        for micro in self.micro_rollouts(rollouts):
            if self.reference_model is not None:
                parts.append(self(self.reference_model, micro))
            elif is_lora(policy):
                with unwrap_model(policy).disable_adapter():
                    parts.append(self(unwrap_model(policy), micro))
            else:
                raise ValueError("beta != 0 needs a reference model (or a LoRA model, whose adapters are disabled)")
        return torch.cat(parts)

    def micro_rollouts(self, rollouts: Micro) -> list[Micro]:
        """The rollout tensors there are, cut into micro-batches (``micro_width`` completions each)."""
        return stack_collate.split({k: rollouts[k] for k in self.rollout_keys if k in rollouts}, self.micro_width)
