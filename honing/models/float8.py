"""``trainer.precision: fp8``: the blocks' linear layers compute in float8 through torchao, the rest as
``bf16-mixed`` (bf16 autocast, fp32 master weights and optimizer).

torchao's ``Float8Linear`` casts each matmul's input and weight to e4m3 and the output gradient to e5m2 with one
dynamic scale per tensor (tensorwise, torchtitan's default recipe) and multiplies them with ``torch._scaled_mm``,
whose float8 tensor-core kernels exist from compute capability 8.9 (Ada, Hopper) on; the weights themselves stay
fp32. The LM head stays in bf16 (its logits feed the loss's softmax, where float8's 3-bit mantissa costs accuracy,
as torchtitan and Llama 3 keep it), and so does any layer whose sizes are not multiples of 16 (``_scaled_mm``'s
constraint). Under FSDP2 the weights are gathered in float8 (half bf16's traffic). Speed comes with compile: the
casts are separate kernels eagerly, fused under ``parallel.compile`` (on by default on CUDA).

The conversion also runs on CPU (``torch._scaled_mm`` has a CPU kernel), which is how the tests check it; a run on
CPU, or on a GPU without float8, is refused in one line, since it would only be slower than bf16.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

from honing.errors import ConfigError
from honing.models.quantize import INSTALL_HINT

FP8 = "fp8"
#: the compute capability from which torch._scaled_mm has float8 tensor-core kernels
FP8_CAPABILITY = (8, 9)


def check_fp8_device(device: torch.device) -> None:
    """Refuse ``trainer.precision: fp8`` on a device without float8 matmuls, in one line naming the fix."""
    if device.type != "cuda":
        raise ConfigError(
            f"trainer.precision: fp8 needs a CUDA GPU with float8 tensor cores (Ada, Hopper or newer); this run is "
            f"on {device.type}: use bf16-mixed"
        )
    capability = torch.cuda.get_device_capability(device)
    if capability < FP8_CAPABILITY:
        name = torch.cuda.get_device_name(device)
        raise ConfigError(
            f"trainer.precision: fp8 needs compute capability 8.9 or newer (Ada, Hopper); {name} has "
            f"{capability[0]}.{capability[1]}: use bf16-mixed"
        )


def convertible(module: nn.Module, name: str, head: nn.Module | None) -> bool:
    """A linear layer whose matmul can run in float8: not the LM head, both sizes multiples of 16."""
    if not isinstance(module, nn.Linear) or module is head:
        return False
    return module.in_features % 16 == 0 and module.out_features % 16 == 0


def convert_linears_to_float8(model: nn.Module, *, fsdp_float8_all_gather: bool = False) -> int:
    """Swap ``model``'s convertible linear layers for torchao's ``Float8Linear`` in place (before FSDP2 wraps
    them); returns how many were converted."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torchao's import-time notices about optional C++ kernels
            from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except ImportError:
        raise ConfigError(f"trainer.precision: fp8 needs torchao, which is not installed: {INSTALL_HINT}") from None
    get_head: Any = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    converted: list[str] = []

    def keep(module: nn.Module, name: str) -> bool:
        if convertible(module, name, head):
            converted.append(name)
            return True
        return False

    config = Float8LinearConfig(enable_fsdp_float8_all_gather=fsdp_float8_all_gather)
    convert_to_float8_training(model, config=config, module_filter_fn=keep)
    if not converted:
        raise ConfigError(
            "trainer.precision: fp8 found no linear layer to convert (none with sizes that are multiples of 16 "
            "outside the LM head): use bf16-mixed"
        )
    return len(converted)


def precompute_scales_after_steps(model: nn.Module, optimizer: torch.optim.Optimizer) -> bool:
    """Under FSDP2's float8 all-gather, compute every weight's float8 scale in one pass after each optimizer step
    (torchao's ``precompute_float8_dynamic_scale_for_fsdp``, as torchtitan does) instead of one small amax kernel per
    weight at each all-gather; returns whether the hook was added (only float8 all-gather needs it)."""
    gathered = [
        module
        for module in model.modules()
        if getattr(getattr(module, "config", None), "enable_fsdp_float8_all_gather", False)
        and type(module).__name__ == "Float8Linear"
    ]
    if not gathered:
        return False
    from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

    optimizer.register_step_post_hook(lambda *_: precompute_float8_dynamic_scale_for_fsdp(model))
    return True
