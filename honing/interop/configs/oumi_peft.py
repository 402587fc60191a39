"""Oumi's ``peft`` section as ``model.lora`` (and ``model.quantize`` for QLoRA), used only with
``training.use_peft`` as in Oumi."""

from __future__ import annotations

import re

from honing.interop.configs.hf_engines import lora_numbers
from honing.interop.configs.translation import Keys, Translation

# peft's default LoRA targets for Llama / Qwen / Mistral models (Oumi passes lora_target_modules: null to peft)
PEFT_DEFAULT_TARGETS = ["q_proj", "v_proj"]
# Oumi's PeftParams defaults where honing's LoraSection differs (rank 8, dropout 0 and bias none agree)
OUMI_LORA_ALPHA = 8.0
# trainer.precision -> the compute dtype QLoRA's de-quantized weights and adapters run in
COMPUTE_DTYPES = {"fp32": "float32", "bf16-mixed": "bfloat16", "bf16": "bfloat16"}


def translate_peft(t: Translation, peft: Keys, *, use_peft: bool, method: str) -> None:
    """``peft.*`` as ``model.lora`` when ``training.use_peft``; without it, full fine-tuning (peft unused)."""
    if not use_peft:
        if peft.values:
            t.note("peft", "unused: training.use_peft is not true, so Oumi fine-tunes every weight (as here)")
        peft.taken.update(peft.values)
        if method in ("vl_sft", "vl_grpo", "vl_dpo"):  # honing's default for images is LoRA
            t.default("model.lora", None, "Oumi fine-tunes every weight without training.use_peft")
        return
    lora = lora_numbers(peft)
    if peft.has("lora_bias"):
        lora["bias"] = str(peft.take("lora_bias"))
    if peft.has("lora_task_type"):
        lora["task_type"] = str(peft.take("lora_task_type")).upper()
    peft.taken.update({"lora_bias", "lora_task_type"})
    targets = lora_targets(t, peft, method)
    if targets is not None:
        lora["target_modules"] = targets
    target_parameters = peft.names("lora_target_parameters")
    if target_parameters:  # peft's LoRA on bare parameters: MoE experts held as one tensor (gpt-oss)
        lora["target_parameters"] = target_parameters
    modules_to_save = peft.names("lora_modules_to_save")
    if modules_to_save:
        lora["modules_to_save"] = modules_to_save
    t.set("model.lora", lora)
    if "alpha" not in lora:
        t.default("model.lora.alpha", OUMI_LORA_ALPHA, "Oumi's peft.lora_alpha")
    if "target_modules" not in lora and method not in ("vl_sft", "vl_grpo", "vl_dpo"):
        t.default("model.lora.target_modules", PEFT_DEFAULT_TARGETS, "peft's default for Llama / Qwen / Mistral models")
    translate_quantization(t, peft)
    peft.allow(
        "peft_save_mode",
        ("adapter_only", "ADAPTER_ONLY", "merged", "MERGED", "adapter_and_base_model", "ADAPTER_AND_BASE_MODEL"),
        "is not available",
    )
    peft.allow(
        "lora_init_weights", ("DEFAULT", "default", True), "is not available: honing uses peft's default initialisation"
    )
    peft.done()


def lora_targets(t: Translation, peft: Keys, method: str) -> str | list[str] | None:
    """``lora_target_modules`` less ``lora_exclude_modules``: peft's ``all-linear``, a list of names, or one
    regular expression (fully matched by peft) when modules are excluded, as Oumi joins them."""
    targets: str | list[str] | None = peft.names("lora_target_modules")
    if targets == ["all-linear"]:
        targets = "all-linear"  # Oumi's way of writing peft's keyword
    excluded = peft.names("lora_exclude_modules")
    if not excluded:
        return targets
    if not isinstance(targets, list):
        t.refuse(
            "peft.lora_exclude_modules",
            f"not available with lora_target_modules {targets!r}: list the module names to adapt",
        )
        return targets
    # fullmatch: not an excluded path, and a path ending in one of the names (peft's list matching)
    exclude = "|".join(f"(?:{pattern})" for pattern in excluded)
    names = "|".join(re.escape(str(name)) for name in targets)
    return rf"(?!(?:{exclude})\Z)(?:.*\.)?(?:{names})"


def translate_quantization(t: Translation, peft: Keys) -> None:
    """``q_lora`` with its bits and bitsandbytes settings as ``model.quantize`` (4-bit NF4 / FP4 or int8 here)."""
    if not peft.take("q_lora", False):
        rest = [
            name
            for name in peft.values
            if name.startswith(("q_lora_", "bnb_", "use_bnb", "llm_int8_")) and peft.peek(name) not in (None, False, [])
        ]
        if rest:
            t.note("peft", f"{', '.join(rest)}: unused without peft.q_lora (as in Oumi)")
        peft.taken.update(rest)
        return
    bits = peft.allow("q_lora_bits", (4, 8), "is not available: honing quantizes to 4 (nf4) or 8 bits (int8)")
    if bits == 8:
        t.set("model.quantize", "int8")
    else:
        kind = peft.allow("bnb_4bit_quant_type", ("nf4", "fp4"), "is not available: honing's 4-bit codes are nf4, fp4")
        if kind is None:  # Oumi's PeftParams default, bitsandbytes' own: FP4, not the NF4 of QLoRA's paper
            t.default("model.quantize", "fp4", "Oumi's peft.bnb_4bit_quant_type")
        else:
            t.set("model.quantize", kind)
    compute = peft.take("bnb_4bit_compute_dtype")
    if compute is not None:
        ours = COMPUTE_DTYPES.get(str(t.get("trainer.precision", "fp32")))
        if t.get("model.dtype") is not None:
            ours = t.get("model.dtype")
        if str(compute).lower() == ours:
            t.note("peft.bnb_4bit_compute_dtype", f"{compute!r}: honing's QLoRA computes in the run's dtype ({ours})")
        else:
            t.refuse(
                "peft.bnb_4bit_compute_dtype",
                f"{compute!r}: honing's QLoRA computes in the run's dtype ({ours}, from model.torch_dtype_str)",
            )
    peft.note(
        "bnb_4bit_quant_storage",
        "not needed: the dtype bitsandbytes packs 4-bit weights in for FSDP1; honing's 4-bit weights shard as they are",
    )
    peft.note(
        "use_bnb_nested_quant",
        "honing's 4-bit weights always quantize their scales too (torchao's double quantization; a little less memory)",
    )
    skip_modules = peft.names("llm_int8_skip_modules")
    if skip_modules:  # bitsandbytes' modules left unquantized (Falcon-H1's mamba out_proj)
        t.set("model.quantize_skip_modules", skip_modules)
