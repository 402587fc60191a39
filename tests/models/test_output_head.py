"""forward_with_head: the head's function runs inside the model's own forward, on its final hidden states, and
models that change the head's output, or whose head is not a plain linear layer, are left to the full logits."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

from honing.models.output_head import forward_with_head, head_linears, supports_head_fn
from tests.helpers import tiny_llama

IDS = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(0))


def logits_through_head(model, ids=IDS):
    return forward_with_head(model, lambda hidden, weight, bias: F.linear(hidden, weight, bias), lambda: model(ids))


def test_the_function_gets_the_final_hidden_states_and_the_head_weight():
    model = tiny_llama()
    seen = {}

    def head_fn(hidden, weight, bias):
        seen.update(hidden=hidden, weight=weight, bias=bias)
        return hidden.sum(-1)

    result = forward_with_head(model, head_fn, lambda: model(IDS))
    assert seen["weight"] is model.lm_head.weight and seen["bias"] is None
    torch.testing.assert_close(seen["hidden"], model.model(IDS).last_hidden_state, rtol=0, atol=0)
    assert result.shape == (2, 7)
    torch.testing.assert_close(logits_through_head(model), model(IDS).logits, rtol=0, atol=0)
    assert "forward" not in model.lm_head.__dict__  # the head is itself again


def test_the_head_is_restored_when_the_forward_fails():
    model = tiny_llama()

    def fail():
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        forward_with_head(model, lambda hidden, weight, bias: hidden, fail)
    assert "forward" not in model.lm_head.__dict__


def test_tied_head_uses_the_embedding_weight():
    model = tiny_llama(tie_word_embeddings=True)
    assert head_linears(model)[0].weight is model.get_input_embeddings().weight
    torch.testing.assert_close(logits_through_head(model), model(IDS).logits, rtol=0, atol=0)


def test_a_model_that_soft_caps_its_logits_falls_back_once(caplog):
    from transformers import Gemma2Config, Gemma2ForCausalLM

    config = Gemma2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=16,
        final_logit_softcapping=30.0,
    )
    model = Gemma2ForCausalLM(config)
    assert supports_head_fn(model)
    with caplog.at_level(logging.WARNING):
        assert logits_through_head(model) is None
    assert "changes its logits" in caplog.text
    assert not supports_head_fn(model)
    assert logits_through_head(model) is None


def test_lora_on_the_head_is_not_served_and_modules_to_save_is():
    from peft import LoraConfig, get_peft_model

    on_head = get_peft_model(tiny_llama(), LoraConfig(r=2, target_modules=["q_proj", "lm_head"]))
    assert head_linears(on_head) is None
    saved = get_peft_model(tiny_llama(), LoraConfig(r=2, target_modules=["q_proj"], modules_to_save=["lm_head"]))
    assert len(head_linears(saved)) == 2  # the original and the trainable copy
    torch.testing.assert_close(logits_through_head(saved), saved(input_ids=IDS).logits, rtol=0, atol=0)
    with saved.disable_adapter():
        torch.testing.assert_close(logits_through_head(saved), saved(input_ids=IDS).logits, rtol=0, atol=0)
