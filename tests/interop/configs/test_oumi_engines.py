"""Oumi's FSDP1 and DeepSpeed settings become honing's mesh, offload and precision; the settings honing's FSDP2
makes moot get one note each, never a refusal."""

import pytest

from honing.config import validate
from honing.interop.configs import translate


def oumi(**sections):
    """A small Oumi SFT config with extra top-level sections."""
    return {
        "model": {"model_name": "some/model", "torch_dtype_str": "float32"},
        "data": {"train": {"datasets": [{"dataset_name": "yahma/alpaca-cleaned"}]}},
        "training": {"trainer_type": "TRL_SFT"},
        **sections,
    }


def parallel_of(raw):
    """The translated ``parallel`` section (after checking it validates) and the translation."""
    translation = translate(raw)
    assert translation.refused == []
    validate(translation.config, source="oumi")
    return translation.config.get("parallel", {}), translation


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        ("FULL_SHARD", {"strategy": "fsdp"}),
        ("HYBRID_SHARD", {"strategy": "fsdp"}),
        ("SHARD_GRAD_OP", {"strategy": "fsdp", "reshard_after_forward": False}),
        ("HYBRID_SHARD_ZERO2", {"strategy": "fsdp", "reshard_after_forward": False}),
        ("NO_SHARD", {"strategy": "ddp"}),
    ],
)
def test_fsdp_sharding_strategies_become_honings_mesh(strategy, expected):
    parallel, translation = parallel_of(oumi(fsdp={"enable_fsdp": True, "sharding_strategy": strategy}))
    assert parallel == expected
    hybrid = [note for note in translation.notes if note.startswith("fsdp.sharding_strategy")]
    assert bool(hybrid) == strategy.startswith("HYBRID")  # how to replicate over N nodes: parallel.dp_replicate
    assert all("parallel.dp_replicate=N" in note for note in hybrid)


def test_fsdp_offload_and_mixed_precision_and_moot_keys():
    fsdp = {
        "enable_fsdp": True,
        "cpu_offload": True,
        "mixed_precision": "bf16",
        "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "transformer_layer_cls": "LlamaDecoderLayer",
        "forward_prefetch": True,
        "backward_prefetch": "BACKWARD_PRE",
        "state_dict_type": "SHARDED_STATE_DICT",
        "use_orig_params": True,
        "min_num_params": 100000,
    }
    parallel, translation = parallel_of(oumi(fsdp=fsdp))
    assert parallel == {"strategy": "fsdp", "offload": "params", "mixed_precision": "bf16"}
    assert translation.config["trainer"]["precision"] == "bf16-mixed"  # fp32 weights, computed in bf16
    noted = {note.split(":")[0] for note in translation.notes}
    assert {f"fsdp.{name}" for name in fsdp if name not in ("enable_fsdp", "cpu_offload", "mixed_precision")} <= noted


def test_fsdp_mixed_precision_on_bf16_weights_keeps_pure_bf16():
    raw = oumi(fsdp={"enable_fsdp": True, "mixed_precision": "bf16"})
    raw["model"]["torch_dtype_str"] = "bfloat16"
    parallel, translation = parallel_of(raw)
    assert translation.config["trainer"]["precision"] == "bf16" and parallel["mixed_precision"] == "bf16"


def test_a_disabled_engine_section_is_one_note():
    parallel, translation = parallel_of(oumi(fsdp={"enable_fsdp": False, "sharding_strategy": "HYBRID_SHARD"}))
    assert parallel == {}
    assert [note for note in translation.notes if note.startswith("fsdp:")] == [
        "fsdp: sharding_strategy: unused, fsdp.enable_fsdp is not true (as in Oumi)"
    ]


@pytest.mark.parametrize(
    ("deepspeed", "expected"),
    [
        ({"zero_stage": "0"}, {"strategy": "ddp"}),
        ({"zero_stage": "1"}, {"strategy": "fsdp", "reshard_after_forward": False}),
        (
            {"zero_stage": 2, "offload_optimizer": {"device": "cpu"}},
            {"strategy": "fsdp", "reshard_after_forward": False, "offload": "optimizer"},
        ),
        (
            {"zero_stage": "ZERO_3", "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}},
            {"strategy": "fsdp", "offload": "params"},
        ),
        (
            {"stage": 3, "precision": "bf16", "overlap_comm": True, "train_batch_size": "auto"},
            {"strategy": "fsdp", "mixed_precision": "bf16"},
        ),
    ],
)
def test_deepspeed_stages_become_honings_mesh(deepspeed, expected):
    parallel, translation = parallel_of(oumi(deepspeed={"enable_deepspeed": True, **deepspeed}))
    assert parallel == expected
    if "precision" in deepspeed:
        assert translation.config["trainer"]["precision"] == "bf16-mixed"
        assert "deepspeed.overlap_comm: not needed" in " ".join(translation.notes)


@pytest.mark.parametrize(
    ("section", "values", "refused"),
    [
        ("fsdp", {"enable_fsdp": True, "mixed_precision": "fp8"}, "fsdp.mixed_precision: 'fp8' is not available"),
        ("fsdp", {"enable_fsdp": True, "sharding_strategy": "SOMETHING"}, "fsdp.sharding_strategy: 'SOMETHING'"),
        (
            "deepspeed",
            {"enable_deepspeed": True, "zero_stage": "3", "offload_param": {"device": "nvme"}},
            "deepspeed.offload_param: device 'nvme'",
        ),
        (
            "deepspeed",
            {"enable_deepspeed": True, "deepspeed_config_path": "ds.json"},
            "deepspeed.deepspeed_config_path: not translated",
        ),
        (
            "deepspeed",
            {"enable_deepspeed": True, "train_micro_batch_size_per_gpu": 4},
            "deepspeed.train_micro_batch_size_per_gpu: 4",
        ),
        ("deepspeed", {"enable_deepspeed": True, "zero_stage": "4"}, "deepspeed.zero_stage: '4' is not a ZeRO stage"),
    ],
)
def test_what_has_no_equivalent_is_refused_by_name(section, values, refused):
    translation = translate(oumi(**{section: values}))
    assert any(line.startswith(refused) for line in translation.refused), translation.refused


def test_fsdp_fp16_is_fp16_mixed_over_fp32_weights():
    parallel, translation = parallel_of(oumi(fsdp={"enable_fsdp": True, "mixed_precision": "fp16"}))
    assert parallel["mixed_precision"] == "none" and translation.config["trainer"]["precision"] == "fp16-mixed"
