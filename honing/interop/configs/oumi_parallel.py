"""Oumi's ``fsdp`` (PyTorch FSDP1) and ``deepspeed`` (ZeRO) sections as honing's one device mesh: FSDP2 sharding,
replicas, offload and precision (``parallel.*``, ``trainer.precision``).

The sharding an engine setting asks for becomes honing's equivalent; settings that tune how FSDP1 wraps, prefetches
or saves, or how DeepSpeed buckets its collectives, are moot under honing's FSDP2 (it wraps every block, prefetches
the next gather, and writes sharded checkpoints with a full ``hf/`` export) and get one note each.
"""

from __future__ import annotations

import re
from typing import Any

from honing.interop.configs.key_tables import key_table
from honing.interop.configs.oumi_table import OUMI, TABLE
from honing.interop.configs.schema_table import finish
from honing.interop.configs.translation import Keys, Translation

KEYS = key_table("oumi").keys

WRAPS_BLOCKS = "not needed: honing's FSDP2 shards each transformer block by itself"
# FSDP1 settings honing's FSDP2 makes moot -> why
MOOT_FSDP = {
    "auto_wrap_policy": WRAPS_BLOCKS,
    "transformer_layer_cls": WRAPS_BLOCKS,
    "min_num_params": WRAPS_BLOCKS,
    "forward_prefetch": "not needed: honing's FSDP2 prefetches the next block's gather itself",
    "backward_prefetch": "not needed: honing's FSDP2 prefetches the next block's gather itself",
    "state_dict_type": "not needed: honing's checkpoints are sharded (torch.distributed.checkpoint), hf/ is whole",
    "use_orig_params": "not needed: FSDP2 keeps the original parameters (as DTensors)",
    "sync_module_states": "not needed: every rank loads the same weights",
}
# FSDP1 sharding_strategy -> honing's keys (FULL_SHARD: FSDP2 over every process, honing's own default)
SHARDING: dict[str, dict[str, Any]] = {
    "FULL_SHARD": {},
    "HYBRID_SHARD": {},
    "SHARD_GRAD_OP": {"parallel.reshard_after_forward": False},
    "HYBRID_SHARD_ZERO2": {"parallel.reshard_after_forward": False},
    "NO_SHARD": {"parallel.strategy": "ddp"},
}
HYBRID_NOTE = (
    "shards within a node and replicates across nodes: written for one node, where it is FULL_SHARD; on N nodes "
    "set parallel.dp_replicate=N (HSDP: N replicas, each sharded over one node)"
)
ZERO12_NOTE = (
    "ZeRO-{stage} shards optimizer states{grads}: honing's FSDP2 without resharding after forward "
    "(parallel.reshard_after_forward: false) keeps the gathered weights through backward as ZeRO-2 does and shards "
    "the weights at rest too (less memory, the same maths)"
)
# DeepSpeed settings honing's FSDP2 makes moot (its bucketing, overlap and ZeRO-3 prefetch tuning)
MOOT_DEEPSPEED = (
    "overlap_comm", "contiguous_gradients", "reduce_bucket_size", "allgather_bucket_size", "allgather_partitions",
    "reduce_scatter", "round_robin_gradients", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
    "stage3_max_live_parameters", "stage3_max_reuse_distance", "stage3_gather_16bit_weights_on_model_save",
    "sub_group_size", "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "memory_efficient_linear",
    "steps_per_print", "wall_clock_breakdown",
)  # fmt: skip
# DeepSpeed's copies of training.* keys, which Oumi fills with "auto" (the Trainer's own values)
DEEPSPEED_AUTO = {
    "train_batch_size": "training.per_device_train_batch_size x gradient_accumulation_steps",
    "train_micro_batch_size_per_gpu": "training.per_device_train_batch_size",
    "gradient_accumulation_steps": "training.gradient_accumulation_steps",
    "gradient_clipping": "training.max_grad_norm",
}


def translate_parallel(t: Translation, top: Keys) -> None:
    """``fsdp`` / ``deepspeed``: honing's mesh, offload and precision for the engine setting that is enabled."""
    translate_fsdp(t, t.section(top.take("fsdp"), "fsdp"))
    translate_deepspeed(t, t.section(top.take("deepspeed"), "deepspeed"))


def translate_fsdp(t: Translation, fsdp: Keys) -> None:
    """FSDP1's ``sharding_strategy`` / ``cpu_offload`` / ``mixed_precision`` as FSDP2 (or DDP) settings."""
    if not fsdp.take("enable_fsdp"):
        skip_disabled(t, fsdp, "fsdp.enable_fsdp")
        return
    t.set("parallel.strategy", "fsdp")
    strategy = str(fsdp.take("sharding_strategy", "FULL_SHARD")).upper()
    if strategy not in SHARDING:
        t.refuse(
            fsdp.key("sharding_strategy"), f"{strategy!r} is not available; expected one of: {', '.join(SHARDING)}"
        )
    for path, value in SHARDING.get(strategy, {}).items():
        t.set(path, value)
    if strategy.startswith("HYBRID"):
        t.note(fsdp.key("sharding_strategy"), f"{strategy}: {HYBRID_NOTE}")
    if fsdp.take("cpu_offload"):
        t.set("parallel.offload", "params")  # FSDP1's CPUOffload: weights, gradients and optimizer step on the host
    mixed = fsdp.take("mixed_precision")
    if mixed is not None:
        set_mixed_precision(t, fsdp.key("mixed_precision"), str(mixed).lower())
    for name, why in MOOT_FSDP.items():
        fsdp.note(name, why)
    fsdp.done("an FSDP1 setting honing's FSDP2 has no equivalent for")


def set_mixed_precision(t: Translation, key: str, dtype: str) -> None:
    """An engine's mixed precision (``bf16``, ``fp16``, ``fp32``) as FSDP2's weights dtype and ``trainer.precision``."""
    if dtype in ("bf16", "bfloat16"):
        t.set("parallel.mixed_precision", "bf16")
        if t.get("trainer.precision", "fp32") == "fp32":  # fp32 weights computed in bf16: autocast's bf16-mixed
            t.set("trainer.precision", "bf16-mixed")
    elif dtype in ("fp16", "float16"):  # fp32 weights computed in float16 with a loss scale: fp16-mixed
        t.set("parallel.mixed_precision", "none")
        t.set("trainer.precision", "fp16-mixed")
    elif dtype in ("fp32", "float32", "no", "none"):
        t.set("parallel.mixed_precision", "none")
    else:
        t.refuse(key, f"{dtype!r} is not available: expected bf16, fp16 or fp32")


def translate_deepspeed(t: Translation, deepspeed: Keys) -> None:
    """DeepSpeed's ZeRO stage, offload and precision as FSDP2 (or DDP) settings."""
    if not deepspeed.take("enable_deepspeed"):
        skip_disabled(t, deepspeed, "deepspeed.enable_deepspeed")
        return
    deepspeed.refuse(
        "deepspeed_config_path", "not translated: a DeepSpeed JSON file; give its settings as deepspeed.* keys"
    )
    name = "zero_stage" if deepspeed.has("zero_stage") else "stage"
    raw_stage = deepspeed.take(name, "0")
    deepspeed.take("zero_stage")
    stage = re.sub(r"\D", "", str(raw_stage))
    if stage == "0":
        t.set("parallel.strategy", "ddp")
    elif stage in ("1", "2", "3"):
        t.set("parallel.strategy", "fsdp")
        if stage != "3":
            t.set("parallel.reshard_after_forward", False)
            grads = " and gradients" if stage == "2" else ""
            t.note(deepspeed.key(name), ZERO12_NOTE.format(stage=stage, grads=grads))
    else:
        t.refuse(deepspeed.key(name), f"{raw_stage!r} is not a ZeRO stage; expected 0, 1, 2 or 3")
    set_offload(t, deepspeed, "offload_optimizer", "optimizer")
    set_offload(t, deepspeed, "offload_param", "params")
    precision = deepspeed.take("precision")
    if precision is not None:
        set_mixed_precision(t, deepspeed.key("precision"), str(precision).lower())
    for auto_key, training_key in DEEPSPEED_AUTO.items():
        value = deepspeed.take(auto_key)
        if value is not None and value != "auto":
            t.refuse(deepspeed.key(auto_key), f"{value!r}: not translated; give it as {training_key}")
    if deepspeed.peek("activation_checkpointing"):
        deepspeed.refuse(
            "activation_checkpointing", "not translated: set training.enable_gradient_checkpointing (whole blocks)"
        )
    deepspeed.take("activation_checkpointing")
    for moot in MOOT_DEEPSPEED:
        deepspeed.note(moot, "not needed: DeepSpeed's own tuning, which honing's FSDP2 has no setting for")
    deepspeed.done("a DeepSpeed setting honing's FSDP2 has no equivalent for")


def set_offload(t: Translation, deepspeed: Keys, name: str, offload: str) -> None:
    """``offload_optimizer`` / ``offload_param`` to the CPU as ``parallel.offload`` (params covers the optimizer)."""
    value = deepspeed.take(name)
    if value is None:
        return
    if isinstance(value, dict):  # OffloadConfig's tuning keys (buffers, NVMe queues): one note each, from the table
        tuning = t.section({key: item for key, item in value.items() if key != "device"}, deepspeed.key(name))
        finish(tuning, TABLE[f"deepspeed.{name}"], KEYS[f"deepspeed.{name}"], OUMI)
    device = str(value.get("device", "cpu") if isinstance(value, dict) else value).lower()
    if device in ("none", "false"):
        return
    if device != "cpu":
        t.refuse(deepspeed.key(name), f"device {device!r} is not available: honing offloads to host memory (cpu)")
    elif t.get("parallel.offload") != "params":
        t.set("parallel.offload", offload)


def skip_disabled(t: Translation, section: Keys, switch: str) -> None:
    """A disabled engine section: its other settings are unused (as in Oumi), one note for them all."""
    rest = [name for name in section.values if name not in section.taken and section.has(name)]
    if rest:
        t.note(section.prefix, f"{', '.join(rest)}: unused, {switch} is not true (as in Oumi)")
    section.taken.update(section.values)
