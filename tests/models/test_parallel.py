"""parallelize in one process: strategy choice, finding blocks, activation checkpointing, compile, policies.
DDP and FSDP2 themselves run in tests/distributed/ (they need several processes)."""

import pytest
import torch
from torch import nn

from honing.errors import ConfigError
from honing.models.parallel import (
    apply_activation_checkpointing,
    find_blocks,
    full_state_dict,
    gradient_sync,
    mixed_precision_policy,
    parallelize,
    resolve_strategy,
)
from honing.parallel_dims import ParallelDims
from tests.helpers import tiny_llama


@pytest.mark.parametrize(
    "strategy, world_size, expected",
    [
        ("auto", 1, "none"),
        ("auto", 2, "fsdp"),
        ("ddp", 2, "ddp"),
        ("fsdp", 4, "fsdp"),
        ("none", 1, "none"),
        ("ddp", 1, "none"),
        ("fsdp", 1, "none"),
    ],
)
def test_resolve_strategy(strategy, world_size, expected):
    assert resolve_strategy(strategy, world_size) == expected


@pytest.mark.parametrize(
    "strategy, message",
    [
        ("zero3", r"parallel.strategy: expected one of auto, ddp, fsdp, none, got 'zero3'"),
        ("none", r"parallel.strategy: 'none' with 2 processes would train 2 separate models on different data"),
    ],
)
def test_bad_strategy_names_the_key(strategy, message):
    with pytest.raises(ConfigError, match=message):
        resolve_strategy(strategy, 2)


def test_find_blocks_finds_the_decoder_layers_also_inside_a_wrapper():
    model = tiny_llama()
    assert find_blocks(model) == [model.model.layers]

    class Wrapper(nn.Module):  # the shape of a peft model: base_model.model is the causal LM
        def __init__(self, inner):
            super().__init__()
            self.base_model = nn.Module()
            self.base_model.model = inner

    assert find_blocks(Wrapper(model)) == [model.model.layers]


def test_find_blocks_skips_mixed_empty_and_nested_lists():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.experts = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])  # inside a block: not a block list

    model = nn.Module()
    model.layers = nn.ModuleList([Block(), Block(), Block()])
    model.mixed = nn.ModuleList([nn.Linear(2, 2), nn.ReLU()])
    model.empty = nn.ModuleList()
    model.no_params = nn.ModuleList([nn.ReLU(), nn.ReLU()])
    assert find_blocks(model) == [model.layers]


def loss_and_grads(model):
    ids = torch.arange(32).reshape(2, 16) % 64
    model.zero_grad()
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


def count_mlp_calls(model):
    calls = []
    for index, layer in enumerate(model.model.layers):
        layer.mlp.register_forward_pre_hook(lambda module, args, index=index: calls.append(index))
    return calls


def test_full_activation_checkpointing_recomputes_every_block_with_the_same_gradients():
    reference = tiny_llama(num_hidden_layers=4)
    expected_loss, expected_grads = loss_and_grads(reference)
    model = tiny_llama(num_hidden_layers=4)
    names = list(model.state_dict())
    assert apply_activation_checkpointing(find_blocks(model), "full") == 4
    calls = count_mlp_calls(model)
    loss, grads = loss_and_grads(model)
    assert calls == [0, 1, 2, 3, 3, 2, 1, 0]  # forward, then each block again in backward, last first
    assert torch.equal(loss, expected_loss)
    for name, grad in expected_grads.items():
        assert torch.equal(grads[name], grad), name
    assert list(model.state_dict()) == names  # checkpoints and exports see the same parameter names


def test_every_n_checkpoints_every_nth_block_and_not_in_eval():
    model = tiny_llama(num_hidden_layers=4)
    assert apply_activation_checkpointing(find_blocks(model), "every_n", every=2) == 2
    calls = count_mlp_calls(model)
    loss_and_grads(model)
    assert calls == [0, 1, 2, 3, 3, 1]  # the 2nd and 4th blocks are recomputed
    calls.clear()
    model.eval()
    with torch.no_grad():
        model(input_ids=torch.zeros(1, 4, dtype=torch.long))
    assert calls == [0, 1, 2, 3]


@pytest.mark.parametrize(
    "mode, every, message",
    [
        ("some", 1, r"parallel.activation_checkpointing: expected one of none, full, every_n, got 'some'"),
        ("every_n", 0, r"parallel.activation_checkpointing_every: expected an integer >= 1, got 0"),
    ],
)
def test_bad_activation_checkpointing_values(mode, every, message):
    with pytest.raises(ConfigError, match=message):
        apply_activation_checkpointing(find_blocks(tiny_llama()), mode, every)


def test_parallelize_in_one_process_keeps_the_model_and_compiles_blocks_in_place():
    model = tiny_llama()
    names = list(model.state_dict())
    out = parallelize(model, strategy="auto", dims=ParallelDims(), device=torch.device("cpu"), compile=True)
    assert out is model
    assert all(layer._compiled_call_impl is not None for layer in model.model.layers)
    assert model.lm_head._compiled_call_impl is None  # only the repeated blocks
    assert list(model.state_dict()) == names  # no "_orig_mod." in the names


def test_mixed_precision_policy():
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    bf16 = mixed_precision_policy("auto", precision="bf16-mixed", device=cuda)
    assert (bf16.param_dtype, bf16.reduce_dtype) == (torch.bfloat16, torch.float32)
    on_cpu = mixed_precision_policy("auto", precision="bf16-mixed", device=cpu)
    assert (on_cpu.param_dtype, on_cpu.reduce_dtype) == (None, None)  # fp32 throughout
    assert mixed_precision_policy("none", precision="bf16-mixed", device=cuda).param_dtype is None
    assert mixed_precision_policy("bf16", precision="fp32", device=cpu).param_dtype == torch.bfloat16
    with pytest.raises(ConfigError, match="parallel.mixed_precision: expected one of auto, none, bf16, got 'fp8'"):
        mixed_precision_policy("fp8", precision="fp32", device=cpu)


def test_gradient_sync_and_full_state_dict_of_a_plain_model():
    _, expected = loss_and_grads(tiny_llama())
    model = tiny_llama()
    with gradient_sync(model, False):  # nothing to synchronise in one process
        _, grads = loss_and_grads(model)
    assert all(torch.equal(grads[name], grad) for name, grad in expected.items())
    weights = full_state_dict(model)
    assert list(weights) == list(model.state_dict())
    assert all(torch.equal(weights[name], value) for name, value in model.state_dict().items())
