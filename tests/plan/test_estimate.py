"""The memory estimate's arithmetic, against numbers worked out by hand, and ``honing plan`` on a tiny config."""

from __future__ import annotations

import subprocess
import sys

import pytest

from honing.plan.estimate import (
    CHUNK_BYTES,
    NF4_BYTES_PER_WEIGHT,
    PlanInputs,
    Tensors,
    estimate,
    largest_micro_batch,
    parse_bytes,
)

MIB = 2**20


def inputs(**overrides):
    """A two-layer model: 4 linear weights of 1 Mi values, embeddings and head of 2 Mi each, 1,024 tokens."""
    values = dict(
        tensors=Tensors(quantizable=[MIB] * 4, other=[2 * MIB, 2 * MIB], lora=[4096] * 8),
        layers=2,
        hidden=1024,
        vocab=2048,
        activation_bytes_per_token_layer=1000.0,
        tokens=1024,
    )
    values.update(overrides)
    return PlanInputs(**values)


def test_full_fine_tuning_fp32_adamw():
    result = estimate(inputs())
    params = 8 * MIB
    assert result.weights == result.gradients == 4 * params
    assert result.optimizer == 8 * params  # two fp32 moments
    assert result.activations == 2 * 1000 * 1024
    assert result.logits == 2 * min(1024 * 2048 * 4, CHUNK_BYTES) + 1024 * 1024 * 4
    # the optimizer step (every gradient) outweighs forward-backward here
    forward_backward = result.activations + result.logits + 2 * MIB * 4
    assert result.peak == result.weights + result.optimizer + max(forward_backward, result.gradients)


def test_8bit_states_are_a_quarter_and_small_tensors_keep_their_dtype():
    small = Tensors(quantizable=[MIB], other=[1000])
    result = estimate(inputs(tensors=small, state_dtype="int8"))
    eight_bit = 2 * MIB * (1 + 4 / 256)
    update = 24 * MIB  # eager update temporaries (a tensor below the compile threshold)
    assert result.optimizer == int(eight_bit + 2 * 1000 * 4)
    assert result.transients == update


def test_qlora_holds_the_base_in_nf4_and_trains_only_the_adapters():
    result = estimate(inputs(lora=True, quantize="nf4", param_bytes=2, compute_bytes=2))
    assert result.weights == int(4 * MIB * NF4_BYTES_PER_WEIGHT + (4 * MIB + 8 * 4096) * 2)
    assert result.gradients == 8 * 4096 * 2
    assert result.optimizer == 2 * 8 * 4096 * 2
    assert result.build == (8 * MIB + 8 * 4096) * 2  # built in bf16 on the host before it is quantized
    # read from a checkpoint, each weight is quantized as it arrives: the NF4 base and one weight of 1 Mi in bf16
    loaded = estimate(inputs(lora=True, quantize="nf4", param_bytes=2, compute_bytes=2, quantized_while_loading=True))
    assert loaded.build == int(4 * MIB * NF4_BYTES_PER_WEIGHT + (4 * MIB + 8 * 4096) * 2 + MIB * 2)


def test_checkpointing_fsdp_and_offload():
    full = estimate(inputs(activation_checkpointing="full"))
    assert full.activations == 2 * 1024 * 1024 * 4 + 1000 * 1024  # block inputs and one recomputed block
    sharded = estimate(inputs(shards=2))
    assert sharded.weights == estimate(inputs()).weights // 2
    offloaded = estimate(inputs(shards=2, offload="params"))
    assert offloaded.weights == offloaded.gradients == offloaded.optimizer == 0
    assert offloaded.offloaded == sharded.weights + sharded.gradients + sharded.optimizer
    host_optimizer = estimate(inputs(shards=2, offload="optimizer"))  # the device keeps weights and gradients
    assert host_optimizer.optimizer == 0 and host_optimizer.weights == sharded.weights
    assert host_optimizer.offloaded == sharded.weights + sharded.gradients + sharded.optimizer
    assert host_optimizer.peak == sharded.peak - sharded.optimizer


def test_a_per_layer_part_of_the_activations_does_not_grow_with_the_tokens():
    # under autocast each block keeps a bf16 copy of its fp32 weights, whatever the tokens
    plain, with_copies = estimate(inputs()), estimate(inputs(activation_bytes_per_layer=5000.0))
    assert with_copies.activations - plain.activations == 2 * 5000
    doubled = estimate(inputs(activation_bytes_per_layer=5000.0, tokens=2048))
    assert doubled.activations == 2 * (1000 * 2048 + 5000)


def test_a_frozen_reference_copy_holds_the_base_weights_again():
    result = estimate(inputs(reference_copy=True, shards=2))
    assert result.reference == 8 * MIB * 4 // 2  # every weight but adapters, sharded like the policy
    assert result.peak == estimate(inputs(shards=2)).peak + result.reference
    assert "reference model" in result.parts() and "reference model" not in estimate(inputs()).parts()


def test_grpo_rollouts_hold_the_cache_of_every_completion_sampled_at_once():
    rollouts = dict(generation_rows=16, prompt_tokens=96, generated_tokens=32, kv_bytes_per_token_layer=512)
    result = estimate(inputs(**rollouts))
    kv_cache = 16 * (96 + 32) * 2 * 512  # rows x tokens x layers x bytes
    prefill = 1000 * 16 * 96  # one block over every prompt token
    assert result.generation == kv_cache + prefill + 16 * 2048 * 8  # and one step's fp32 logits and probabilities
    # a moment of its own: before forward-backward, after the last step's gradients are gone
    parts = result.weights + result.optimizer + result.runtime
    assert result.peak == parts + max(result.generation, estimate(inputs()).peak - parts)


def test_largest_micro_batch_is_the_boundary():
    plan = inputs(lora=True, tokens=128)
    budget = estimate(inputs(lora=True, tokens=128 * 37)).peak
    assert largest_micro_batch(plan, budget, seq_len=128) == 37
    assert largest_micro_batch(plan, budget - 1, seq_len=128) == 36
    assert largest_micro_batch(plan, 1, seq_len=128) == 0


def test_parse_bytes():
    assert parse_bytes("20GiB") == parse_bytes("20G") == 20 * 2**30
    assert parse_bytes("512 MiB") == 512 * MIB
    with pytest.raises(ValueError, match="20GiB"):
        parse_bytes("lots")


CONFIG = """
method: sft
trainer: {save_folder: SAVE, num_threads: 1}
data:
  train: {sources: [{path: "generated:reverse?samples=16&seed=0"}]}
  chat_template: chatml
  seq_len: 128
  global_batch_size: 4
  cache_dir: CACHE
model:
  config: {model_type: llama, hidden_size: 64, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2,
           intermediate_size: 128}
  lora: {rank: 8}
  quantize: nf4
"""


def test_plan_cli_prints_the_parts_and_the_largest_micro_batch(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(CONFIG.replace("SAVE", str(tmp_path / "run")).replace("CACHE", str(tmp_path / "cache")))
    result = subprocess.run(
        [sys.executable, "-m", "honing", "plan", str(path), "--budget", "2GiB"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]
    for part in ("weights", "gradients", "optimizer state", "activations", "logits", "peak per rank"):
        assert part in result.stdout
    assert "in nf4" in result.stdout and "largest micro-batch within 2.00 GiB:" in result.stdout


def test_plan_refuses_a_bad_budget_in_one_line(tmp_path, capsys):
    from honing.cli import main

    path = tmp_path / "run.yaml"
    path.write_text(CONFIG.replace("SAVE", str(tmp_path / "run")).replace("CACHE", str(tmp_path / "cache")))
    assert main(["plan", str(path), "--budget", "lots"]) == 2
    assert capsys.readouterr().err.count("honing: error: --budget") == 1


def test_plan_refuses_what_the_run_would_refuse(tmp_path, capsys):
    from honing.cli import main

    path = tmp_path / "run.yaml"
    path.write_text(CONFIG.replace("SAVE", str(tmp_path / "run")).replace("CACHE", str(tmp_path / "cache")))
    assert main(["plan", str(path), "parallel.offload=optimizer"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert error == [error[0]] and "parallel.offload: 'optimizer' moves GPU memory to the host" in error[0]


def test_the_measuring_hook_saves_no_reference_back_to_the_graph():
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef

    from honing.plan.from_config import storage_recorder

    storages: dict = {}
    output = torch.ones(4, requires_grad=True) * 2
    saved = storage_recorder(set(), storages)(output)
    # an output saved as itself refers to its own grad_fn: a cycle in C++ that kept every measured model's
    # tensors alive (1.4 GiB a call at width 3,072); the saved alias shares the storage and has no graph
    assert saved.grad_fn is None and saved.untyped_storage().data_ptr() == output.untyped_storage().data_ptr()
    assert storages == {StorageWeakRef(output.untyped_storage()): 16}


def tiny_config(model_type: str, **extra):
    from transformers import AutoConfig

    shape = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=32)
    return AutoConfig.for_model(model_type, num_hidden_layers=2, vocab_size=64, **shape, **extra)


@pytest.mark.parametrize(
    "model_type, extra, autocast",
    [
        ("llama", {}, False),
        ("qwen3", {}, True),
        # fp32 experts: the grouped matmul has no fake kernel for fp32, so these blocks are measured for real
        ("qwen3_moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64), False),
    ],
)
def test_blocks_measured_on_fake_tensors_save_what_real_ones_do(model_type, extra, autocast):
    import torch

    from honing.plan.from_config import block_activation_bytes, measured_block_bytes

    config = tiny_config(model_type, **extra)
    real = measured_block_bytes(config, compute_dtype=torch.float32, autocast=autocast)
    assert real.per_token > 0
    # autocast keeps a bf16 copy of each fp32 weight it multiplies by, whatever the tokens
    assert (real.per_layer > 1000) == autocast  # (a MoE keeps a few bytes of routing counts per block)
    assert block_activation_bytes(config, compute_dtype=torch.float32, autocast=autocast) == real


def peak_resident_bytes() -> int:
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmHWM"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads and resets /proc/self's peak")
def test_a_70b_block_is_planned_without_its_memory():
    import torch
    from transformers import LlamaConfig

    from honing.plan.from_config import block_activation_bytes

    # Llama-3-70B's block: two of them are 1.7 B parameters, 3.4 GB in bf16 if they were real
    config = LlamaConfig(
        hidden_size=8192, intermediate_size=28672, num_attention_heads=64, num_key_value_heads=8, num_hidden_layers=80
    )
    block_activation_bytes(tiny_config("llama"), compute_dtype=torch.bfloat16, autocast=False)  # imports, warm-up
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")  # the peak resident set starts again from the present one
    before = peak_resident_bytes()
    block = block_activation_bytes(config, compute_dtype=torch.bfloat16, autocast=False)
    assert peak_resident_bytes() - before < 256 * MIB
    # at least the block's input, the attention's output and the MLP's three 28,672-wide activations, in bf16
    assert block.per_token > 2 * (2 * 8192 + 3 * 28672)
    assert block.per_layer == 0  # bf16 weights: nothing is saved whatever the tokens
