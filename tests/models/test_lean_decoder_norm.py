"""The lean decoder's CPU RMSNorm gives transformers' ``LlamaRMSNorm`` (and ``torch.rms_norm``) bit for bit: its
cheaper operators must not move a rollout's logits."""

from __future__ import annotations

import pytest
import torch
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from honing.models.lean_decoder import cpu_rms_norm

# hidden sizes of the benchmark's and tests' models and of small checkpoints (SmolLM's 576, Qwen2.5-0.5B's 896),
# each with its model's eps
EPS = {64: 1e-6, 128: 1e-6, 576: 1e-5, 896: 1e-6}
SHAPES = ((8,), (3, 5), (2, 4, 1))  # a step's rows, a prefill's rows x tokens, a step's heads (Qwen3's head norms)


def llama_norm(hidden: int, dtype: torch.dtype) -> LlamaRMSNorm:
    norm = LlamaRMSNorm(hidden, eps=EPS[hidden])
    with torch.no_grad():  # a trained norm's weights, not ones
        norm.weight.copy_(1 + 0.3 * torch.randn(hidden, generator=torch.Generator().manual_seed(hidden)))
    return norm.to(dtype)


def inputs(shape: tuple[int, ...], hidden: int, dtype: torch.dtype) -> list[torch.Tensor]:
    """Values of an ordinary scale and ones small enough for eps to count, in ``dtype``."""
    generator = torch.Generator().manual_seed(len(shape))
    x = torch.randn(*shape, hidden, generator=generator)
    return [(3 * x).to(dtype), (1e-3 * x).to(dtype)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("hidden", sorted(EPS))
def test_the_cpu_norm_gives_llama_rms_norm_s_bits(hidden, dtype):
    reference = llama_norm(hidden, dtype)
    ours = cpu_rms_norm(reference.weight, reference.variance_epsilon, dtype)
    with torch.no_grad():
        for shape in SHAPES:
            for x in inputs(shape, hidden, dtype):
                assert torch.equal(ours(x), reference(x)), f"{shape} {dtype}"
                if dtype == torch.float32:
                    fused = torch.rms_norm(x, (hidden,), reference.weight, reference.variance_epsilon)
                    assert torch.equal(ours(x), fused)


@pytest.mark.parametrize("hidden", [128, 896])
def test_a_strided_input_and_a_wider_weight_give_the_same_bits(hidden):
    """The prefill's last column (a strided view), and bf16 states under an fp32 weight (the product promotes)."""
    fp32_norm = llama_norm(hidden, torch.float32)
    states = inputs((3, 5), hidden, torch.float32)[0]
    with torch.no_grad():
        assert torch.equal(
            cpu_rms_norm(fp32_norm.weight, fp32_norm.variance_epsilon, torch.float32)(states[:, -1]),
            fp32_norm(states[:, -1]),
        )
        bf16_states = states.bfloat16()
        promoted = cpu_rms_norm(fp32_norm.weight, fp32_norm.variance_epsilon, torch.bfloat16)(bf16_states)
        assert promoted.dtype == torch.float32
        assert torch.equal(promoted, fp32_norm(bf16_states))
