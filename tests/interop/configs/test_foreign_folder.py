"""``honing convert`` over the real configs of the source systems in ``../shared/foreign-configs`` (not part of the
repository: skipped where absent), and over Oumi configs with random values in random places: never a traceback,
a translation or one line per key refused."""

import copy
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from honing.config import ConfigError, validate
from honing.interop.configs import translate
from honing.interop.configs.survey import report, survey

FOREIGN = Path(__file__).resolve().parents[3].parent / "shared" / "foreign-configs"
# Oumi's published configs honing translates; a change that refuses more of them fails here (124 in the folder)
OUMI_TRANSLATED_AT_LEAST = 109
# the only reasons an Oumi config is refused today: a method or a capability honing lacks, named
OUMI_REFUSED_KEYS = {
    "training.trainer_type",  # TRL_KTO; DPO and GRPO on images
    "model.model_revision",  # Falcon-E's BitNet fine-tuning
    "data.train.datasets[i].subset",  # a hub dataset's named configuration
    "training.reward_functions",  # VERL_GRPO without one: verl's built-in reward by data_source (Molmo's geo3k)
    # what the refused ones above also hold (GRPO on images: verl's own keys, its validation set, vLLM)
    "data.validation",
    "training.grpo.use_vllm",
    "training.trainer_kwargs.max_prompt_length",
    "data.train.datasets[i].dataset_kwargs.processor_name",
}
needs_folder = pytest.mark.skipif(not FOREIGN.is_dir(), reason=f"{FOREIGN} is absent (the source systems' configs)")


@needs_folder
def test_oumis_published_configs_translate_or_are_refused_for_a_missing_method_by_name():
    found = survey(FOREIGN / "oumi")
    print(report(found, "oumi"))
    assert found.tracebacks == {}
    assert len(found.translated) >= OUMI_TRANSLATED_AT_LEAST
    keys = {line.split(": ")[0] for line in found.reasons(first_only=False)}
    assert {key for key in keys if not key.startswith("training.verl_config_overrides.")} <= OUMI_REFUSED_KEYS


@needs_folder
def test_olmocrs_configs_never_end_in_a_traceback():
    found = survey(FOREIGN / "olmocr")
    print(report(found, "olmocr"))
    assert found.tracebacks == {} and found.total == 18


SMALL_OUMI = {
    "model": {"model_name": "m/m", "model_max_length": 64, "torch_dtype_str": "bfloat16", "chat_template": "auto"},
    "data": {
        "train": {
            "datasets": [{"dataset_name": "a/b", "split": "train[:8]", "dataset_kwargs": {"limit": 4}}],
            "collator_name": "text_with_padding",
            "collator_kwargs": {"response_template": "x"},
        }
    },
    "training": {
        "trainer_type": "TRL_SFT",
        "per_device_train_batch_size": 2,
        "learning_rate": 1e-4,
        "lr_scheduler_type": "cosine",
        "lr_scheduler_kwargs": {"num_cycles": 0.5},
        "warmup_ratio": 0.1,
        "max_steps": 5,
        "gradient_checkpointing_kwargs": {"use_reentrant": False},
        "grpo": {"num_generations": 2},
        "verl_config_overrides": {"data": {"max_prompt_length": 8}},
        "use_peft": True,
    },
    "peft": {"lora_r": 4, "q_lora": True, "lora_target_modules": ["q_proj"], "lora_exclude_modules": [".*v.*"]},
    "fsdp": {"enable_fsdp": True, "sharding_strategy": "HYBRID_SHARD", "mixed_precision": "bf16"},
    "deepspeed": {"enable_deepspeed": True, "zero_stage": "2", "offload_optimizer": {"device": "cpu"}},
}

SMALL_OLMOCR = {
    "model": {"name_or_path": "m/vl", "arch": "causal", "use_flash_attn": False},
    "lora": {"rank": 8, "alpha": 16, "target_modules": ["q_proj", "visual.blocks.[0-9]+.attn.qkv"]},
    "train_data": {
        "seed": 1,
        "sources": [{"name": "p", "response_glob_path": "r/*.jsonl", "target_longest_image_dim": [1024]}],
    },
    "valid_data": {"metric_for_best_model": "eval_loss", "sources": [{"name": "v", "response_glob_path": "v/*.jsonl"}]},
    "hparams": {"batch_size": 1, "gradient_accumulation_steps": 2, "max_steps": 4, "eval_every_steps": 2, "seed": 1},
    "save": {"path": "out", "save_every_steps": 2, "limit": 1},
}


def paths(value, prefix=()):
    """Every key path and list index path in ``value``."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield (*prefix, key)
        yield from paths(child, (*prefix, key))


VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.sampled_from(["auto", "FULL_SHARD", "VERL_GRPO", "TRL_DPO", "TRL_GRPO", "OUMI", "nf4", "cpu", "all-linear"]),
    st.lists(st.one_of(st.integers(), st.text(max_size=5)), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
@given(
    config=st.sampled_from([SMALL_OUMI, SMALL_OLMOCR]), picks=st.lists(st.tuples(st.integers(0), VALUES), max_size=4)
)
def test_any_values_anywhere_translate_or_refuse_in_one_line_per_key(config, picks):
    raw = copy.deepcopy(config)
    where = list(paths(config))
    for index, value in picks:
        path = where[index % len(where)]
        node = raw
        try:
            for part in path[:-1]:
                node = node[part]
            node[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change replaced a section above this path
    translation = translate(raw)
    if translation is None:  # no section of either system is left: read as honing's own config
        return
    assert all("\n" not in line for line in translation.refused + translation.notes)
    if not translation.refused:
        try:
            validate(translation.config, source="translated")
        except ConfigError as error:
            assert "\n" not in str(error)


def test_the_small_oumi_config_itself_translates_where_its_sections_apply():
    raw = copy.deepcopy(SMALL_OUMI)
    assert translate(raw).refused == [
        "training.grpo: used by GRPO trainers only, not 'sft'",
        "training.verl_config_overrides: used by trainer_type VERL_GRPO only",
    ]
    del raw["training"]["grpo"], raw["training"]["verl_config_overrides"]
    translation = translate(raw)
    assert translation.refused == []
    config = validate(translation.config, source="oumi")
    assert config.parallel.offload == "optimizer" and config.model.quantize == "fp4"  # Oumi's bnb_4bit_quant_type


def test_a_key_holding_a_line_break_is_refused_on_one_line():
    raw = {**copy.deepcopy(SMALL_OUMI), "\n": 0}  # hypothesis found it: a YAML key "\n"
    refused = translate(raw).refused
    assert refused[-1] == "\\n: not a key of Oumi's TrainingConfig (check its spelling)"
    assert all("\n" not in line for line in refused)
