"""What a translated config asks of this machine that it cannot give: the nearest working choice, with one note in the
translation's header (honing's own config is refused in one line instead, when the model is built)."""

from __future__ import annotations

import importlib.util

from honing.interop.configs.translation import Translation

# transformers' flash-attention implementations -> the module of the package each needs (flash-attn, flash-attn-3)
FLASH_PACKAGES = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface"}


def flash_attention_installed(name: str) -> bool:
    """Whether the package of flash-attention implementation ``name`` is installed (found without importing torch,
    which a translation never does)."""
    return importlib.util.find_spec(FLASH_PACKAGES[name]) is not None


def set_attention(t: Translation, key: str, name: str) -> None:
    """The foreign config's attention implementation as ``model.attn_implementation``; a flash attention whose package
    this machine lacks (every olmOCR config asks for flash_attention_2) becomes sdpa, the same attention."""
    if name in FLASH_PACKAGES and not flash_attention_installed(name):
        t.set("model.attn_implementation", "sdpa")
        t.note(
            key,
            f"{name!r}: its package ({FLASH_PACKAGES[name]}) is not installed here, so sdpa: the same attention, "
            "without flash attention's speed (install it and set model.attn_implementation to use it)",
        )
        return
    t.set("model.attn_implementation", name)


def settle_vllm_mode(t: Translation, section: str, key: str) -> None:
    """``<section>.vllm_mode: colocate`` with ``use_vllm`` (vLLM inside the training process; TRL's default mode),
    which honing does not build, becomes honing's own decoder sampling in the training process, the same role, with
    one note on ``key`` (the foreign key that asked for it) naming the way to a rollout server instead. Called once the
    section's keys are all read."""
    if t.get(f"{section}.vllm_mode") != "colocate" or not t.get(f"{section}.use_vllm"):
        return
    t.unset(f"{section}.vllm_mode")
    t.set(f"{section}.use_vllm", False)
    t.note(
        key,
        "'colocate' (vLLM inside the training process) is not built in honing: its own KV-cached decoder samples the "
        f"completions in the training process instead ({section}.use_vllm: false); to sample with vLLM, start a "
        f"rollout server (make vllm-serve; docs/rollout-server.md) and set {section}.use_vllm: true, "
        f"{section}.vllm_mode: server",
    )
