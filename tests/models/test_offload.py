"""``parallel.offload`` and ``parallel.activation_offload``: the refusals (one line naming the key) where they
cannot work, FSDP2's offload policy, and that offloading a block's saved activations leaves its gradients as
they were (the CUDA copies themselves need a GPU)."""

from __future__ import annotations

import pytest
import torch

from honing.errors import ConfigError
from honing.models.offload import check_offload, offload_block_activations, offload_policy
from tests.helpers import tiny_llama

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


@pytest.mark.parametrize(
    "offload, activation_offload, device, strategy, message",
    [
        ("none", True, CPU, "none", "parallel.activation_offload: true moves saved activations"),
        ("params", False, CPU, "fsdp", "parallel.offload: 'params' moves GPU memory to the host"),
        ("optimizer", False, CPU, "none", "parallel.offload: 'optimizer' moves GPU memory to the host"),
        ("params", False, CUDA, "ddp", "parallel.offload: 'params' is FSDP2's CPUOffloadPolicy"),
        ("disk", False, CUDA, "fsdp", "parallel.offload: expected one of none, optimizer, params"),
    ],
)
def test_offload_refusals_name_the_key(offload, activation_offload, device, strategy, message):
    with pytest.raises(ConfigError, match=message) as error:
        check_offload(offload, activation_offload, device=device, strategy=strategy)
    assert "\n" not in str(error.value)


def test_what_is_accepted():
    check_offload("none", False, device=CPU, strategy="none")
    check_offload("params", True, device=CUDA, strategy="fsdp")
    for strategy in ("none", "ddp", "fsdp"):  # HostOffloadAdamW takes plain tensors and FSDP2's shards alike
        check_offload("optimizer", False, device=CUDA, strategy=strategy)
    policy = offload_policy("params")
    assert type(policy).__name__ == "CPUOffloadPolicy" and policy.pin_memory
    assert type(offload_policy("none")).__name__ == "OffloadPolicy"


def test_offloaded_block_gives_the_same_gradients():
    grads = []
    for offload in (False, True):
        model = tiny_llama()
        if offload:
            for block in model.model.layers:
                offload_block_activations(block)
        ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
        model(input_ids=ids, labels=ids).loss.backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for plain, offloaded in zip(*grads):
        assert torch.equal(plain, offloaded)
