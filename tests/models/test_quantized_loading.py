"""QLoRA's base read shard by shard (``honing.models.quantized_loading``): the same quantized codes and scales, buffers,
config and first LoRA losses as the full-precision model quantized in place and as transformers' own loader gives,
from a checkpoint in several fp32 shards; and the host's anonymous memory while loading stays within the quantized
model plus one shard plus 20 %."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

pytest.importorskip("torchao")

from honing.models.loading import load_pretrained_model  # noqa: E402
from honing.models.lora import apply_lora  # noqa: E402
from honing.models.quantize import is_quantized, plain_parts, quantize_model  # noqa: E402
from honing.models.quantized_loading import (  # noqa: E402
    load_quantized_pretrained,
    meta_model,
    quantizing_load_options,
)
from tests.helpers import tiny_llama  # noqa: E402

CPU = torch.device("cpu")
REPO = Path(__file__).resolve().parents[2]


def shards_of(folder: Path) -> list[Path]:
    return sorted(folder.glob("model-*.safetensors"))


def read_shard_by_shard(folder: Path, kind: str, dtype: torch.dtype) -> torch.nn.Module:
    return load_quantized_pretrained(
        str(folder), kind, attn_implementation="sdpa", dtype=dtype, trust_remote_code=False, auto_class=None,
        device=CPU, shards=1,
    )  # fmt: skip


def read_by_transformers(folder: Path, kind: str, dtype: torch.dtype) -> torch.nn.Module:
    """The loader QLoRA used before (and still uses for checkpoints honing does not read itself)."""
    from transformers import AutoConfig

    skeleton = meta_model(
        AutoConfig.from_pretrained(folder), None, attn_implementation="sdpa", dtype=dtype, trust_remote_code=False
    )
    options = quantizing_load_options(kind, model=skeleton, device=CPU, shards=1)
    model = load_pretrained_model(str(folder), dtype=dtype, **options)
    quantize_model(model, kind, device=CPU)  # as the run does next: it forgets transformers' quantizer
    assert "quantization_config" not in model.config.to_dict() and model.hf_quantizer is None
    return model


def assert_same_model(model: torch.nn.Module, reference: torch.nn.Module) -> None:
    params, expected = dict(model.named_parameters()), dict(reference.named_parameters())
    assert params.keys() == expected.keys()
    for name, param in params.items():
        assert type(param.data) is type(expected[name].data), name  # quantized where the reference is
        assert param.requires_grad == expected[name].requires_grad, name
        parts, reference_parts = plain_parts(param.detach()), plain_parts(expected[name].detach())
        assert len(parts) == len(reference_parts), name
        for part, reference_part in zip(parts, reference_parts):  # the codes and every level of scales
            assert part.dtype == reference_part.dtype and torch.equal(part, reference_part), name
    buffers, expected_buffers = dict(model.named_buffers()), dict(reference.named_buffers())
    assert buffers.keys() == expected_buffers.keys()
    assert all(torch.equal(buffers[name], expected_buffers[name]) for name in buffers)  # e.g. rotary frequencies
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert tied == (reference.get_output_embeddings().weight is reference.get_input_embeddings().weight)
    assert model.config.to_dict() == reference.config.to_dict()  # what an export's config.json says
    assert model.generation_config.to_dict() == reference.generation_config.to_dict()
    assert model.training == reference.training


def first_losses(model: torch.nn.Module, steps: int = 3) -> list[float]:
    """LoRA on every decoder linear, a few AdamW steps on one fixed batch."""
    torch.manual_seed(0)
    model = apply_lora(model, rank=4, alpha=8, dropout=0.0, target_modules="all-linear")
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    ids = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
    losses = []
    for _ in range(steps):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize(
    "kind, dtype, tied",
    [
        ("nf4", torch.float32, False),
        ("fp4", torch.float32, False),
        ("int8", torch.float32, False),
        ("nf4", torch.bfloat16, True),
    ],  # fmt: skip
)
def test_shard_by_shard_reading_gives_todays_quantized_model(tmp_path, kind, dtype, tied):
    tiny_llama(
        vocab=64, hidden_size=64, intermediate_size=128, num_attention_heads=4, tie_word_embeddings=tied
    ).save_pretrained(tmp_path, max_shard_size="40KB")  # fp32, in several shards
    assert len(shards_of(tmp_path)) >= 2
    model = read_shard_by_shard(tmp_path, kind, dtype)
    assert sum(is_quantized(p) for p in model.parameters()) == 7 * 2  # every decoder linear, not the head
    built = load_pretrained_model(str(tmp_path), dtype=dtype)  # full precision, then quantized in place
    quantize_model(built, kind, device=CPU)
    assert_same_model(model, built)
    assert_same_model(model, read_by_transformers(tmp_path, kind, dtype))
    assert quantize_model(model, kind, device=CPU) == 7 * 2  # the run's quantize step keeps what was read
    assert first_losses(model) == first_losses(built)


def test_both_loaders_leave_the_skip_modules_in_full_precision_as_quantize_model_does(tmp_path):
    tiny_llama(vocab=64, hidden_size=64, intermediate_size=128, num_attention_heads=4).save_pretrained(
        tmp_path, max_shard_size="40KB"
    )
    skip = ["o_proj"]
    model = load_quantized_pretrained(
        str(tmp_path), "nf4", attn_implementation="sdpa", dtype=torch.float32, trust_remote_code=False,
        auto_class=None, device=CPU, shards=1, skip_modules=skip,
    )  # fmt: skip
    built = load_pretrained_model(str(tmp_path), dtype=torch.float32)
    quantize_model(built, "nf4", device=CPU, skip_modules=skip)
    assert sum(is_quantized(p) for p in model.parameters()) == 6 * 2  # every decoder linear but o_proj
    assert_same_model(model, built)
    skeleton = meta_model(model.config, None, attn_implementation="sdpa", dtype=torch.float32, trust_remote_code=False)
    options = quantizing_load_options("nf4", model=skeleton, device=CPU, shards=1, skip_modules=skip)
    by_transformers = load_pretrained_model(str(tmp_path), dtype=torch.float32, **options)
    assert not is_quantized(by_transformers.model.layers[0].self_attn.o_proj.weight)
    assert is_quantized(by_transformers.model.layers[0].self_attn.q_proj.weight)


# Run in a fresh process: the peak anonymous memory (RssAnon, what no file backs: the checkpoint's mapped pages are
# left out), sampled every millisecond while the loader runs, over the baseline after a warm-up load of a tiny model.
MEASURE = """
import json, sys, threading, time
import torch
from honing.models.quantize import plain_parts
from honing.models.quantized_loading import load_quantized_pretrained

def anonymous():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("RssAnon:"))

def load(folder):
    return load_quantized_pretrained(folder, "nf4", attn_implementation="sdpa", dtype=torch.float32,
                                     trust_remote_code=False, auto_class=None, device=torch.device("cpu"), shards=1)

load(sys.argv[2])  # the imports and lazily built parts of a first load are the baseline, not this load's cost
baseline, peak, done = anonymous(), [0], threading.Event()

def sample():
    while not done.is_set():
        peak[0] = max(peak[0], anonymous())
        time.sleep(0.001)

sampler = threading.Thread(target=sample)
sampler.start()
model = load(sys.argv[1])
done.set()
sampler.join()
held = {id(t): t for t in [*model.parameters(), *model.buffers()]}.values()
model_bytes = sum(part.numel() * part.element_size() for tensor in held for part in plain_parts(tensor.detach()))
print(json.dumps({"baseline": baseline, "peak": max(peak[0], anonymous()), "model_bytes": model_bytes}))
"""


@pytest.mark.slow
def test_loading_holds_at_most_the_quantized_model_and_one_shard(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    shape = dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=14, num_attention_heads=12)
    config = LlamaConfig(**shape, num_key_value_heads=4, vocab_size=8000, tie_word_embeddings=False)
    with torch.device("meta"):
        parameters = sum(p.numel() for p in LlamaForCausalLM(config).parameters())
    assert 80e6 < parameters < 110e6
    model = LlamaForCausalLM(config)
    big, tiny = tmp_path / "big", tmp_path / "tiny"
    model.save_pretrained(big, max_shard_size="200MB")  # fp32: ~400 MB in 3 shards
    del model
    tiny_llama().save_pretrained(tiny)
    shards = shards_of(big)
    assert len(shards) >= 2
    # glibc hands freed blocks back at once (as benchmarks/memory.py), so the peak is what was live
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}
    script = textwrap.dedent(MEASURE)
    result = subprocess.run(
        [sys.executable, "-c", script, str(big), str(tiny)], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    largest_shard = max(path.stat().st_size for path in shards)
    bound = (measured["model_bytes"] + largest_shard) * 1.2
    # the fp32 model would be ~400 MB; the quantized one is ~95 MB (NF4 decoder, fp32 embeddings and head)
    assert measured["model_bytes"] < 0.3 * parameters * 4
    assert measured["peak"] - measured["baseline"] <= bound, (measured, largest_shard)


def test_a_checkpoint_in_bin_files_is_read_by_transformers_into_the_same_weights(tmp_path, caplog):
    model = tiny_llama(vocab=64, hidden_size=64, intermediate_size=128, num_attention_heads=4)
    model.config.save_pretrained(tmp_path)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")  # no safetensors: honing's reader does not apply
    with caplog.at_level(logging.INFO, logger="honing.models.quantized_loading"):
        loaded = read_shard_by_shard(tmp_path, "nf4", torch.float32)
    assert "read and quantized by transformers' loader" in caplog.text
    quantize_model(loaded, "nf4", device=CPU)  # as the run does next
    built = load_pretrained_model(str(tmp_path))
    quantize_model(built, "nf4", device=CPU)
    assert_same_model(loaded, built)
