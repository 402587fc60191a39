"""QLoRA's quantized base (``honing.models.quantize``): which weights are quantized, how NF4's blocks are chosen
for FSDP2 shards, and that de-quantizing gives back the values the forward uses."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("torchao")

from honing.errors import ConfigError  # noqa: E402
from honing.models.quantize import (  # noqa: E402
    check_has_lora,
    dequantize,
    dequantized_copy,
    is_quantized,
    nf4_scaler_block,
    quantize_model,
    quantized_bytes,
)
from tests.helpers import tiny_llama  # noqa: E402


def test_nf4_scaler_block_keeps_qlora_blocks_and_fits_shards():
    assert nf4_scaler_block(4096 * 4096, 4096) == 256  # QLoRA's double quantization for real weights
    assert nf4_scaler_block(4096 * 4096, 4096, shards=8) == 256
    # a small weight: 32 blocks of 64 -> blocks of 4 scales leave 8 factors, the same for 1 and 2 shards
    assert nf4_scaler_block(32 * 64, 32) == nf4_scaler_block(32 * 64, 32, shards=2) == 4
    assert nf4_scaler_block(100, 10) is None  # not whole blocks of 64
    assert nf4_scaler_block(64 * 64, 63, shards=2) is None  # rows do not split in two


@pytest.mark.parametrize("kind", ["nf4", "fp4", "int8"])
def test_quantized_decoder_linears_forward_close_to_full_precision(kind):
    torch.manual_seed(0)
    model = tiny_llama(vocab=64, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2)
    ids = torch.randint(0, 64, (2, 16))
    with torch.no_grad():
        reference = model(input_ids=ids).logits
    count = quantize_model(model, kind, device=torch.device("cpu"))
    quantized = [name for name, p in model.named_parameters() if is_quantized(p)]
    assert count == len(quantized) == 7 * model.config.num_hidden_layers
    assert not any("lm_head" in name or "embed" in name or "norm" in name for name in quantized)
    assert all(not p.requires_grad for name, p in model.named_parameters() if name in quantized)
    with torch.no_grad():
        logits = model(input_ids=ids).logits
        copy_logits = dequantized_copy(model)(input_ids=ids).logits
    relative = (logits - reference).norm() / reference.norm()
    # FP4 spends codes on tiny and large values, NF4 on a Gaussian's quantiles: on Gaussian weights FP4 errs more
    assert relative < {"nf4": 0.1, "fp4": 0.15, "int8": 0.01}[kind], relative
    torch.testing.assert_close(copy_logits, logits, atol=1e-5, rtol=1e-5)  # the copy holds the same values
    assert all(is_quantized(p) for name, p in model.named_parameters() if name in quantized)  # model untouched
    weight = dict(model.named_parameters())[quantized[0]]
    full = dequantize(weight.detach())
    assert type(full) is torch.Tensor and full.shape == weight.shape
    linear_bytes = sum(dict(model.named_parameters())[name].numel() for name in quantized) * 4
    assert quantized_bytes(model) < linear_bytes * (0.3 if kind == "int8" else 0.15)


def test_quantize_needs_lora_and_a_known_kind():
    with pytest.raises(ConfigError, match="model.quantize: 'nf4' needs model.lora"):
        check_has_lora("nf4", None)
    check_has_lora(None, None)
    with pytest.raises(ConfigError, match="model.quantize: expected one of nf4, fp4, int8"):
        quantize_model(tiny_llama(), "fp8", device=torch.device("cpu"))


def test_skip_modules_stay_plain_linears_in_full_precision():
    # Oumi's Falcon-H1 QLoRA recipe: llm_int8_skip_modules: [out_proj]; here o_proj, and all of layer 1
    model = tiny_llama(vocab=64, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    count = quantize_model(model, "nf4", device=torch.device("cpu"), skip_modules=["o_proj", "model.layers.1"])
    assert count == 6  # layer 0's seven linears less its o_proj
    skipped = [model.model.layers[0].self_attn.o_proj, *model.model.layers[1].modules()]
    for module in (m for m in skipped if isinstance(m, torch.nn.Linear)):
        assert type(module.weight.data) is torch.Tensor and module.weight.requires_grad
    weight = "model.layers.0.self_attn.o_proj.weight"
    assert torch.equal(dict(model.named_parameters())[weight], before[weight])
    assert is_quantized(model.model.layers[0].self_attn.q_proj.weight)


def test_a_skip_module_that_names_no_quantized_linear_is_a_config_error():
    with pytest.raises(ConfigError, match=r"model.quantize_skip_modules\[0\]: 'out_proj' names no linear layer"):
        quantize_model(tiny_llama(), "nf4", device=torch.device("cpu"), skip_modules=["out_proj"])
    with pytest.raises(ConfigError, match="'lm_head' names no linear layer"):  # the head is never quantized
        quantize_model(tiny_llama(), "int8", device=torch.device("cpu"), skip_modules=["lm_head"])


def test_skip_modules_without_quantize_are_refused_not_ignored():
    from pydantic import ValidationError

    from honing.config.model_schema import ModelSection

    with pytest.raises(ValidationError, match="model.quantize_skip_modules: only with model.quantize"):
        ModelSection(name_or_path="m", quantize_skip_modules=["out_proj"])
    assert ModelSection(name_or_path="m", quantize="nf4", quantize_skip_modules=["out_proj"]).quantize_skip_modules
