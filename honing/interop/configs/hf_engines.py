"""What axolotl's and LLaMA-Factory's files both hand to transformers and accelerate: a DeepSpeed JSON file, FSDP
settings, fp16 / bf16, and LoRA's numbers and target names, as honing's ``parallel.*``, ``trainer.precision`` and
``model.lora`` keys. The DeepSpeed file is read (relative to the working directory, as both systems read it, or to the
config's folder) and its settings go through the same table as Oumi's ``deepspeed`` section."""

from __future__ import annotations

import json
import os
from typing import Any, get_args

from honing.config.trainer_schema import TrainerSection
from honing.interop.configs.oumi_parallel import translate_deepspeed
from honing.interop.configs.translation import Keys, Translation

# a DeepSpeed JSON's precision blocks: "auto" follows the trainer's own bf16 / fp16 flags, which the file's run sets
PRECISION_BLOCKS = ("bf16", "fp16")
# ZeRO-3 settings DeepSpeed reads with or without the stage3_ prefix
ZERO3_ALIASES = (
    "max_live_parameters", "max_reuse_distance", "gather_16bit_weights_on_model_save", "prefetch_bucket_size",
    "param_persistence_threshold",
)  # fmt: skip
# FSDP settings of accelerate / axolotl's fsdp_config that honing's FSDP2 makes moot
MOOT_FSDP_CONFIG = {
    "auto_wrap_policy", "transformer_layer_cls_to_wrap", "fsdp_auto_wrap_policy", "fsdp_transformer_layer_cls_to_wrap",
    "state_dict_type", "fsdp_state_dict_type", "sync_module_states", "fsdp_sync_module_states", "use_orig_params",
    "fsdp_use_orig_params", "cpu_ram_efficient_loading", "fsdp_cpu_ram_efficient_loading", "backward_prefetch",
    "fsdp_backward_prefetch", "forward_prefetch", "fsdp_forward_prefetch", "limit_all_gathers", "version",
    "fsdp_version", "min_num_params", "fsdp_min_num_params", "final_state_dict_type",
}  # fmt: skip


def fp16_available() -> bool:
    """True once honing trains in fp16 with loss scaling (``trainer.precision: fp16-mixed``)."""
    return "fp16-mixed" in get_args(TrainerSection.model_fields["precision"].annotation)


def set_fp16(t: Translation, key: str) -> None:
    """``fp16: true`` as ``trainer.precision: fp16-mixed`` where honing has it; refused otherwise."""
    if fp16_available():
        t.set("trainer.precision", "fp16-mixed")
    else:
        t.refuse(key, "not yet: honing has no fp16 mixed precision with loss scaling; use bf16 (a GPU since Ampere)")


def found_file(path: str, config_path: str | None) -> str | None:
    """``path`` as given (from the working directory) or beside the config file; None when neither exists."""
    candidates = [path]
    if config_path and not os.path.isabs(path):
        candidates.append(os.path.join(os.path.dirname(os.path.abspath(config_path)), path))
    return next((candidate for candidate in candidates if os.path.isfile(candidate)), None)


def translate_deepspeed_file(t: Translation, key: str, value: Any, config_path: str | None) -> None:
    """A DeepSpeed JSON (a path, or the mapping itself): its ZeRO stage, offload and precision as honing's mesh."""
    settings = value
    if isinstance(value, str):
        path = found_file(value, config_path)
        if path is None:
            t.refuse(key, f"{value!r}: no such file (from the working directory or the config's folder)")
            return
        try:
            with open(path, encoding="utf-8") as handle:
                settings = json.load(handle)
        except (OSError, json.JSONDecodeError) as error:
            t.refuse(key, f"{value!r}: not a DeepSpeed JSON file ({error})")
            return
    if not isinstance(settings, dict):
        t.refuse(key, f"{value!r}: expected a DeepSpeed JSON file or mapping")
        return
    settings = dict(settings)  # the caller's mapping stays as given: the same file translates the same way twice
    zero = settings.pop("zero_optimization", {}) or {}
    zero = dict(zero) if isinstance(zero, dict) else zero
    section: dict[str, Any] = {
        "enable_deepspeed": True,
        "zero_stage": zero.pop("stage", 0) if isinstance(zero, dict) else 0,
    }
    if isinstance(zero, dict):
        # DeepSpeed also reads ZeRO-3's settings without their stage3_ prefix
        section.update({f"stage3_{name}" if name in ZERO3_ALIASES else name: item for name, item in zero.items()})
    for block in PRECISION_BLOCKS:
        enabled = (settings.pop(block, None) or {}).get("enabled", "auto")
        if enabled not in ("auto", False, "false"):
            if block == "bf16":
                section["precision"] = "bf16"
            else:
                set_fp16(t, f"{key}.fp16.enabled")
    section.update(settings)  # the batch keys ("auto"), gradient_clipping, steps_per_print, ...
    translate_deepspeed(t, t.section(section, key))


def translate_fsdp_config(t: Translation, key: str, config: Any) -> None:
    """accelerate's / axolotl's ``fsdp_config`` mapping: offload, resharding and activation checkpointing."""
    fsdp = t.section(config, key)
    t.set("parallel.strategy", "fsdp")
    for name in ("offload_params", "fsdp_offload_params", "cpu_offload"):
        if fsdp.take(name):
            t.set("parallel.offload", "params")
    for name in ("reshard_after_forward", "fsdp_reshard_after_forward"):
        value = fsdp.take(name)
        if value is not None:
            # FSDP1's sharding strategy names (accelerate) or FSDP2's boolean
            text = str(value).upper()
            t.set("parallel.reshard_after_forward", text not in ("FALSE", "SHARD_GRAD_OP", "2"))
    for name in ("activation_checkpointing", "fsdp_activation_checkpointing"):
        if fsdp.take(name):
            t.set("parallel.activation_checkpointing", "full")
    strategy = fsdp.take("sharding_strategy") or fsdp.take("fsdp_sharding_strategy")
    if strategy is not None and str(strategy).upper() in ("SHARD_GRAD_OP", "2"):
        t.set("parallel.reshard_after_forward", False)
    elif strategy is not None and str(strategy).upper() in ("NO_SHARD", "3"):
        t.set("parallel.strategy", "ddp")
    for name in list(fsdp.values):
        if name in MOOT_FSDP_CONFIG or name.removeprefix("fsdp_") in MOOT_FSDP_CONFIG:
            fsdp.note(name, "not needed: honing's FSDP2 shards each block and writes sharded checkpoints with hf/")
    fsdp.done("an FSDP setting honing's FSDP2 has no equivalent for")


def lora_numbers(keys: Keys) -> dict[str, Any]:
    """peft's ``lora_r`` / ``lora_alpha`` / ``lora_dropout``, which Oumi, axolotl and TRL name alike, as
    ``model.lora``'s ``rank`` / ``alpha`` / ``dropout`` (only those given)."""
    lora: dict[str, Any] = {}
    for name, key, kind in (
        ("lora_r", "rank", int),
        ("lora_alpha", "alpha", float),
        ("lora_dropout", "dropout", float),
    ):
        value = keys.number(name, kind)
        if value is not None:
            lora[key] = value
    return lora


def follow_peft_target_rule(t: Translation) -> None:
    """A translated list of LoRA target names keeps peft's rule, which every system honing translates is built on: a
    name the model lacks (a Llama config's ``q_proj`` on Phi-3's fused ``qkv_proj``) is passed over, not an error
    (``model.lora.missing_targets: skip``; the run names what it skipped)."""
    if isinstance(t.get("model.lora.target_modules"), list):
        t.set("model.lora.missing_targets", "skip")


def lora_targets(value: Any) -> str | list[str] | None:
    """LoRA target names: ``all`` (LLaMA-Factory) / ``all-linear`` as peft's keyword, a comma list as names."""
    if value is None:
        return None
    names = [part.strip() for part in value.split(",")] if isinstance(value, str) else [str(v) for v in value]
    names = [name for name in names if name]
    if names in (["all"], ["all-linear"]):
        return "all-linear"
    return names or None
