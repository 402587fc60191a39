"""GRPO's completion log-probs with each group's prompt computed once equal the plain forward's (float32 rounding),
through the chunked head and the full logits alike; ``grpo.shared_prompt_forward: false`` keeps the plain forward."""

from __future__ import annotations

import contextlib

import pytest
import torch

from honing.config.grpo_schema import GRPOSection
from honing.methods.grpo_logps import CompletionLogps
from honing.methods.grpo_settings import grpo_settings
from tests.models.test_lean_decoder import build
from tests.models.test_shared_prompt_forward import grouped_rows


def rollout_micro(vocab: int) -> dict[str, torch.Tensor]:
    ids, mask, width, _ = grouped_rows(vocab)
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "completion_ids": ids[:, -width:],
        "completion_mask": mask[:, -width:],
    }


@pytest.mark.parametrize("chunked", [True, False])
def test_shared_prompt_logps_equal_the_plain_forward(chunked):
    model = build("qwen2").train()
    micro = rollout_micro(model.config.vocab_size)

    def logps(shared: bool) -> tuple[torch.Tensor, torch.Tensor]:
        model.zero_grad()
        scorer = CompletionLogps(
            temperature=0.7,
            chunked=chunked,
            autocast=contextlib.nullcontext,
            micro_width=6,
            rollout_keys=list(micro),
            shared_prompts=shared,
        )
        values = scorer(model, micro)
        (values * micro["completion_mask"]).sum().backward()
        return values.detach() * micro["completion_mask"], model.model.embed_tokens.weight.grad.clone()

    plain, plain_grad = logps(False)
    shared, shared_grad = logps(True)
    assert plain.abs().sum() > 0
    assert (shared - plain).abs().max() < 1e-5
    assert (shared_grad - plain_grad).abs().max() < 1e-5 * plain_grad.abs().max()


def test_the_key_reaches_the_settings():
    assert grpo_settings(GRPOSection()).shared_prompt_forward is True
    assert grpo_settings(GRPOSection(shared_prompt_forward=False)).shared_prompt_forward is False
