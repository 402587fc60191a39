"""``trainer.precision: fp8``: which linear layers become torchao's float8 ones, the CPU stand-in of their matmuls
training like bf16 autocast, and the refusals on devices without float8."""

import os
import pathlib
import socket
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from honing.errors import ConfigError
from honing.models.float8 import check_fp8_device, convert_linears_to_float8, precompute_scales_after_steps
from honing.recipes.base import run_precision
from tests.helpers import tiny_llama

pytest.importorskip("torchao.float8")

REPO = pathlib.Path(__file__).resolve().parents[2]


def float8_names(model: nn.Module) -> set[str]:
    return {name for name, module in model.named_modules() if type(module).__name__ == "Float8Linear"}


def test_the_blocks_linears_are_converted_and_the_head_and_odd_sizes_are_not():
    model = tiny_llama(vocab=64, intermediate_size=72)  # 72 is no multiple of 16: the MLP stays bf16
    count = convert_linears_to_float8(model)
    names = float8_names(model)
    expected = {f"model.layers.{i}.self_attn.{p}_proj" for i in range(2) for p in "qkvo"}
    assert names == expected and count == len(expected)
    assert type(model.lm_head) is nn.Linear and type(model.model.layers[0].mlp.up_proj) is nn.Linear


def train_losses(model: nn.Module, steps: int) -> list[float]:
    """Losses of ``steps`` AdamW steps on one fixed batch under bf16 autocast (the forward ``fp8`` runs in)."""
    torch.manual_seed(1)
    batch = torch.randint(0, 64, (4, 32))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(steps):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def test_float8_matmuls_train_like_bf16_on_the_cpu_stand_in():
    reference = train_losses(tiny_llama(vocab=64, hidden_size=64, intermediate_size=128), steps=12)
    model = tiny_llama(vocab=64, hidden_size=64, intermediate_size=128)
    assert convert_linears_to_float8(model) == 14  # 7 linear layers in each of the 2 blocks
    float8 = train_losses(model, steps=12)
    assert float8[-1] < 0.9 * float8[0]  # it learns the batch
    # float8's 3-bit mantissa is coarser than bf16's 7: close to the bf16 curve, not equal to it
    assert max(abs(a - b) / b for a, b in zip(float8, reference, strict=True)) < 0.05
    assert float8 != reference


def test_a_device_without_float8_is_refused_in_one_line(monkeypatch):
    with pytest.raises(ConfigError, match="needs a CUDA GPU with float8 tensor cores.*use bf16-mixed"):
        check_fp8_device(torch.device("cpu"))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    with pytest.raises(ConfigError, match="A100-SXM4-80GB has 8.0: use bf16-mixed"):
        check_fp8_device(torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    check_fp8_device(torch.device("cuda", 0))  # Hopper: accepted


def test_a_run_asking_for_fp8_on_cpu_is_refused_before_any_model_is_read():
    trainer = SimpleNamespace(precision="fp8", emulated_bf16="warn")
    with pytest.raises(ConfigError, match="trainer.precision: fp8"):
        run_precision(trainer, torch.device("cpu"))


FSDP_FLOAT8_SCRIPT = """
import os, sys
import torch, torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1], RANK="0", WORLD_SIZE="1")
dist.init_process_group("gloo")
from torch.distributed.fsdp import fully_shard
from honing.models.float8 import convert_linears_to_float8, precompute_scales_after_steps
from tests.helpers import tiny_llama
model = tiny_llama(vocab=64, hidden_size=64, intermediate_size=128)
convert_linears_to_float8(model, fsdp_float8_all_gather=True)
for layer in model.model.layers:
    fully_shard(layer)
fully_shard(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
assert precompute_scales_after_steps(model, optimizer)
batch = torch.randint(0, 64, (2, 16))
with torch.autocast("cpu", dtype=torch.bfloat16):
    model(input_ids=batch, labels=batch).loss.backward()
optimizer.step()
largest = torch.finfo(torch.float8_e4m3fn).max
for module in model.modules():
    if type(module).__name__ == "Float8Linear":
        expected = largest / module.weight.full_tensor().detach().abs().max()
        torch.testing.assert_close(module.weight._local_tensor._precomputed_scale, expected.float())
print("SCALES OK")
dist.destroy_process_group()
"""


def test_float8_all_gather_scales_are_computed_after_each_optimizer_step():
    """FSDP2 with float8 all-gather (one gloo rank): after a step, every weight's scale is max(fp8) / its new amax."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", FSDP_FLOAT8_SCRIPT, port], env=env, capture_output=True, text=True, timeout=300
    )
    assert "SCALES OK" in done.stdout, done.stderr[-2000:]


def test_no_scale_hook_without_float8_all_gather():
    model = tiny_llama(vocab=64, hidden_size=64, intermediate_size=128)
    convert_linears_to_float8(model)
    assert not precompute_scales_after_steps(model, torch.optim.AdamW(model.parameters()))
