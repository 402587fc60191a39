"""Reaching through wrappers: unwrap_model keeps peft, transformers_model goes inside it too."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaForCausalLM

from honing.models.lora import apply_lora
from honing.models.wrappers import is_lora, transformers_model, unwrap_model
from tests.helpers import tiny_llama

pytestmark = pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning")


class FakeDDP(torch.nn.Module):
    """What DDP looks like from outside: the wrapped model as ``.module`` (a real DDP needs a process group)."""

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        self.module = module


def test_a_plain_model_is_its_own_unwrapped_and_transformers_model():
    model = tiny_llama()
    assert unwrap_model(model) is model and transformers_model(model) is model
    assert not is_lora(model)


def test_ddp_and_compile_wrappers_are_removed():
    model = tiny_llama()
    wrapped = FakeDDP(torch.compile(model))
    assert unwrap_model(wrapped) is model
    assert transformers_model(wrapped) is model


def test_a_lora_model_unwraps_to_peft_and_to_the_transformers_model_inside_it():
    base = tiny_llama()
    peft_model = apply_lora(base, rank=2, target_modules=["q_proj"])
    wrapped = FakeDDP(torch.compile(peft_model))
    assert unwrap_model(wrapped) is peft_model
    assert is_lora(wrapped) and is_lora(peft_model)
    inner = transformers_model(wrapped)
    assert inner is base and isinstance(inner, LlamaForCausalLM)
    assert any("lora_A" in name for name, _ in inner.named_parameters())  # the adapters live in its layers
