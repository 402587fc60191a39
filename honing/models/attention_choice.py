"""Which attention kernel a run uses: ``model.attn_implementation: auto`` picks by device and row layout.

Packed rows (SFT with ``data.packing``, pretraining with ``data.document_masking``) hold several documents
told apart by ``position_ids`` that restart at 0. With sdpa, transformers turns those into a dense
per-document mask: exact, but every row costs its full width squared and sdpa cannot use its flash kernel.
On CUDA two kernels make a packed row cost only its documents' own attention:

- flash attention (the ``flash_attn`` package, FA2 or Hopper's FA3) reads the documents' boundaries from
  ``position_ids`` as varlen ``cu_seqlens``; it needs bf16 inputs and a micro-batch of one row, which the
  varlen collator (``honing.data.collate.VarlenCollator``) makes by laying a micro-batch's rows end to end;
- ``flex_attention`` (in torch) takes transformers' document mask as a block-sparse mask and skips the
  blocks across documents.

On CPU sdpa stays: flex_attention there has no backward and gave NaN (tests/data/test_packed_attention_paths.py),
and flash attention is CUDA-only. Rows without documents (padded batches) keep sdpa everywhere: on CUDA it
already runs a flash kernel when there is no mask.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from honing.errors import ConfigError

if TYPE_CHECKING:
    from torch import nn

__all__ = [
    "AUTO",
    "AttentionChoice",
    "attention_kernel",
    "check_attention_available",
    "choose_attention",
    "installed_flash_attention",
    "is_flash",
]

AUTO = "auto"
#: transformers' names for the flash-attention packages, best first (FA3 runs on Hopper only)
FLASH_NAMES = ("flash_attention_3", "flash_attention_2")


@dataclass(frozen=True)
class AttentionChoice:
    """The attention implementation to run and, for ``auto``, why it was picked."""

    name: str
    reason: str = ""


def is_flash(name: str | None) -> bool:
    """Whether ``name`` is one of transformers' flash-attention implementations (varlen from position_ids)."""
    return bool(name) and str(name).startswith("flash_attention")


def attention_kernel(module: nn.Module, name: str) -> Callable[..., Any]:
    """The function transformers runs for implementation ``name`` in the attention layer ``module`` (for wrappers that
    stand in for it): eager is each model file's own (some soft-cap or add sinks), the others are shared."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    own = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None) if name == "eager" else None
    return own or ALL_ATTENTION_FUNCTIONS[name]


def installed_flash_attention() -> str | None:
    """The best flash-attention implementation whose package is installed (and usable on this GPU), else None."""
    from transformers.utils import is_flash_attn_2_available, is_flash_attn_3_available

    if is_flash_attn_3_available():
        return "flash_attention_3"
    if is_flash_attn_2_available():
        return "flash_attention_2"
    return None


def check_attention_available(
    requested: str | None, *, device_type: str, available: Callable[[str], bool] | None = None
) -> None:
    """A flash-attention kernel asked for where it cannot run: one line naming ``model.attn_implementation`` and the
    fix, before any model is read (transformers answers with an ImportError traceback at load). ``available``: whether
    an implementation's package is installed and usable here (default: transformers' own checks)."""
    if not is_flash(requested):
        return
    key = f"model.attn_implementation: {requested!r}"
    if device_type != "cuda":
        raise ConfigError(f"{key} runs on CUDA GPUs only and this run is on {device_type}; set it to sdpa (or auto)")
    if not (available or flash_attention_usable)(str(requested)):
        package = "flash-attn-3 (flash_attn_interface)" if requested == "flash_attention_3" else "flash-attn"
        raise ConfigError(
            f"{key} needs the {package} package, which is not installed here: pip install it, or set "
            "model.attn_implementation to sdpa (or auto: flex_attention for packed rows)"
        )


def flash_attention_usable(name: str) -> bool:
    """Whether transformers can run flash-attention implementation ``name`` here (its package installed, on CUDA)."""
    from transformers.utils import is_flash_attn_2_available, is_flash_attn_3_available

    return is_flash_attn_3_available() if name == "flash_attention_3" else is_flash_attn_2_available()


def choose_attention(
    requested: str | None,
    *,
    device_type: str,
    packed_rows: bool,
    precision: str,
    supports_flash: bool,
    supports_flex: bool,
    flash_available: Callable[[], str | None] | None = None,
) -> AttentionChoice:
    """``requested`` as given, or for ``auto`` the kernel that makes packed rows cost only their documents'
    attention on CUDA (flash attention when installed and the run computes in bf16, else flex_attention), and
    sdpa everywhere else. ``supports_*``: the model class's own flags (``_supports_flash_attn`` and so on);
    ``flash_available``: which flash attention is installed (default: :func:`installed_flash_attention`)."""
    if requested != AUTO:
        return AttentionChoice(requested or "sdpa")
    if device_type != "cuda":
        return AttentionChoice("sdpa", "auto: not on CUDA")
    if not packed_rows:
        return AttentionChoice("sdpa", "auto: rows without packed documents")
    flash = (flash_available or installed_flash_attention)() if supports_flash else None
    if flash and precision in ("bf16", "bf16-mixed", "fp8"):
        return AttentionChoice(flash, "auto: packed rows on CUDA, varlen flash attention")
    if supports_flex:
        why = "flash-attn not installed" if flash is None else f"{flash} needs bf16 and precision is {precision}"
        if not supports_flash:
            why = "the model has no flash-attention path"
        return AttentionChoice("flex_attention", f"auto: packed rows on CUDA, document block mask ({why})")
    return AttentionChoice("sdpa", "auto: packed rows on CUDA, but the model supports neither flash nor flex")
