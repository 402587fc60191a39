"""The lean rollout decoder gives the transformers forward's logits for every architecture it takes, and declines
the rest."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from honing.models.generation import TransformersDecoder, sample_completions
from honing.models.lean_decoder import lean_decoder
from tests.models.lora_fixtures import trained_lora_model

SHAPE = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, max_position_embeddings=128)
ARCHITECTURES = {
    "llama": dict(num_attention_heads=4, num_key_value_heads=4),
    "llama-gqa": dict(num_attention_heads=4, num_key_value_heads=2),
    # frequencies that change with the length: no precomputed table, each step's from the rotary module
    "llama-dynamic": dict(
        num_attention_heads=4, rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}
    ),
    "mistral": dict(num_attention_heads=4, num_key_value_heads=2, sliding_window=None),
    "qwen2": dict(num_attention_heads=4, num_key_value_heads=2),  # biases on q, k and v
    "qwen3": dict(num_attention_heads=4, num_key_value_heads=2, head_dim=24),  # per-head norms, wider heads
}


def build(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    config = AutoConfig.for_model(name.split("-")[0], **SHAPE, **ARCHITECTURES[name])
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()
    with torch.no_grad():  # norms start at one and biases at zero: make them count
        for parameter_name, parameter in model.named_parameters():
            if "norm" in parameter_name or parameter_name.endswith("bias"):
                parameter.add_(0.3 * torch.randn_like(parameter))
    return model


def left_padded_prompts(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, vocab, (3, 9), generator=generator)
    mask = torch.ones_like(ids)
    mask[0, :4] = 0  # rows of different lengths, padded on the left
    mask[2, :1] = 0
    return ids.masked_fill(mask == 0, 0), mask


def decode_both(model: torch.nn.Module, steps: int = 6) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Logits of the prefill and of ``steps`` appended tokens, from each decoder, fed the same tokens."""
    ids, mask = left_padded_prompts(model.config.vocab_size)
    lean, reference = lean_decoder(model), TransformersDecoder(model)
    assert lean is not None
    feed = torch.randint(3, model.config.vocab_size, (steps, ids.shape[0]), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        outputs = [lean.prefill(ids, mask, steps)], [reference.prefill(ids, mask, steps)]
        for tokens in feed:
            outputs[0].append(lean.step(tokens))
            outputs[1].append(reference.step(tokens))
    return outputs


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_logits_equal_the_transformers_forward_at_every_step(name):
    lean, reference = decode_both(build(name))
    for step, (ours, theirs) in enumerate(zip(lean, reference)):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5, msg=f"{name}: step {step}")


def test_a_fixed_rope_is_tabled_once_and_a_dynamic_one_is_not():
    ids, mask = left_padded_prompts(SHAPE["vocab_size"])
    tabled, dynamic = lean_decoder(build("llama")), lean_decoder(build("llama-dynamic"))
    with torch.no_grad():
        tabled.prefill(ids, mask, 4)
        dynamic.prefill(ids, mask, 4)
    # every position the rollout reaches, repeated for each of the 4 heads of 16 dimensions (a step's 2-D width)
    assert tabled.rope_table is not None and tabled.rope_table[0].shape == (ids.shape[1] + 4, 4 * 16)
    assert dynamic.rope_table is None


def test_lora_adapters_are_applied():
    model = trained_lora_model()
    lean, reference = decode_both(model)
    for ours, theirs in zip(lean, reference):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    with model.disable_adapter():  # the adapters change the logits, so equality above is not trivial
        assert not torch.allclose(decode_both(model)[0][1], lean[1], atol=1e-3)


def test_other_architectures_and_sliding_windows_decode_with_transformers():
    torch.manual_seed(0)
    gpt2 = AutoModelForCausalLM.from_config(AutoConfig.for_model("gpt2", n_layer=1, n_embd=32, n_head=2))
    windowed = AutoModelForCausalLM.from_config(
        AutoConfig.for_model("mistral", **SHAPE, num_attention_heads=4, sliding_window=16)
    )
    assert lean_decoder(gpt2) is None
    assert lean_decoder(windowed) is None


def test_sampled_completions_are_the_transformers_path_s(monkeypatch):
    model = build("qwen2")
    ids, mask = left_padded_prompts(model.config.vocab_size)
    kwargs = dict(max_new_tokens=8, stop_token_ids=[5], pad_token_id=0, seeds=[7, 8, 9], temperature=1.0, top_k=20)
    lean = sample_completions(model, ids, mask, **kwargs)
    monkeypatch.setattr("honing.models.generation.lean_decoder", lambda model: None)
    reference = sample_completions(model, ids, mask, **kwargs)
    assert torch.equal(lean[0], reference[0]) and torch.equal(lean[1], reference[1])
