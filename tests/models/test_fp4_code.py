"""``model.quantize: fp4``: bitsandbytes' FP4 code on NF4's blocks. Each weight's value over its block's scale is the
FP4 value bitsandbytes' kernel picks (its decision tree, written out here from its CUDA source), and, where
bitsandbytes is installed, the value its own ``quantize_4bit`` gives on the CPU."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("torchao")

from honing.models.quantize import FP4_TABLE, NF4_BLOCK, dequantize, fp4_weight, nf4_weight  # noqa: E402


def bitsandbytes_fp4(x: float) -> float:
    """bitsandbytes' ``dQuantizeFP4`` then ``dDequantizeFP4Tree`` on one value in [-1, 1]: its thresholds, values."""
    sign, x = (-1.0 if x < 0 else 1.0), abs(x)
    if x > 0.29166667:
        if x > 0.583333:
            value = 1.0 if x > 0.8333333 else 0.66666667
        else:
            value = 0.5 if x > 0.4166667 else 0.33333333
    elif x > 0.0859375:
        value = 0.25 if x > 0.20833333 else 0.16666667
    else:
        value = 5.208333333e-03 if x > 0.00260417 else 0.0
    return sign * value


def normalized(weight: torch.Tensor, quantized: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(each weight over its block's exact absmax, each de-quantized value over its block's stored scale)."""
    blocks = weight.reshape(-1, NF4_BLOCK)
    stored = dequantize(quantized).reshape(-1, NF4_BLOCK)
    scales = quantized.dequantize_scalers(
        quantized.quantized_scalers, quantized.quantization_factor, quantized.scaler_block_size
    )
    return blocks / blocks.abs().amax(dim=1, keepdim=True), stored / scales.unsqueeze(1)


def test_each_value_is_the_fp4_value_bitsandbytes_picks():
    torch.manual_seed(0)
    weight = torch.randn(64, 256)
    quantized = fp4_weight(weight)
    inputs, codes = normalized(weight, quantized)
    expected = torch.tensor([bitsandbytes_fp4(x) for x in inputs.flatten().tolist()]).reshape(codes.shape)
    torch.testing.assert_close(codes, expected, atol=1e-6, rtol=0)
    assert {round(v, 6) for v in codes.flatten().tolist()} <= {round(v, 6) for v in FP4_TABLE}
    # another code than NF4's: the same blocks and scales, other values
    assert not torch.equal(dequantize(quantized), dequantize(nf4_weight(weight)))


def test_fp4_equals_bitsandbytes_own_quantize_4bit_on_cpu():
    functional = pytest.importorskip("bitsandbytes.functional")
    torch.manual_seed(1)
    weight = torch.randn(32, 128)
    packed, state = functional.quantize_4bit(weight, blocksize=NF4_BLOCK, quant_type="fp4")
    theirs = functional.dequantize_4bit(packed, state, quant_type="fp4").reshape(-1, NF4_BLOCK)
    their_codes = theirs / state.absmax.unsqueeze(1)
    _, ours = normalized(weight, fp4_weight(weight))
    torch.testing.assert_close(ours, their_codes, atol=1e-6, rtol=0)
