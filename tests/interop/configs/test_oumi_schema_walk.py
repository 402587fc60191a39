"""Oumi's ``TrainingConfig`` tree walked key by key (``schema_keys/oumi.json``, generated from Oumi's dataclasses):
every key has a row in ``oumi_table`` and no row names another key; each honoured key, set alone to a value other than
its default, becomes the honing key its row names with the value it means; each refused key set is refused in one line
naming it; each moot key set is noted, never refused."""

from __future__ import annotations

import copy

import pytest

from honing.interop.configs import oumi_table, translate
from honing.interop.configs.key_tables import key_table
from honing.interop.configs.schema_table import counts, schema_default

KEYS = key_table("oumi").keys

BASE = {
    "model": {"model_name": "Qwen/Qwen2.5-0.5B-Instruct"},
    "data": {"train": {"datasets": [{"dataset_name": "text_sft_jsonl", "dataset_path": "train.jsonl"}]}},
    "training": {"trainer_type": "TRL_SFT"},
}
# a group's keys are read when the config takes that path: its trainer, or its switch
TRAINERS = {"training.grpo": "TRL_GRPO", "training.gkd": "TRL_GKD", "training.gold": "TRL_GOLD"}
HUB = {"dataset_name": "yahma/alpaca-cleaned"}
TWO = [{"dataset_name": "text_sft_jsonl", "dataset_path": "a.jsonl"},
       {"dataset_name": "text_sft_jsonl", "dataset_path": "b.jsonl"}]  # fmt: skip
SCHEDULE = {"enable_schedule": True}


def sources(*paths: str, split: str = "train", **extra) -> dict:
    """The honing sources the translation writes for conversation files ``paths`` (``extra`` on each)."""
    return {f"data.{split}.sources": [{"path": path, "format": "conversation", **extra} for path in paths]}


# honoured keys whose translation is not "the row's honing key = the value": "group:key" -> (value, {key: value})
SPECIAL = {
    ":data": ({"train": {"datasets": TWO[:1]}}, sources("a.jsonl")),
    ":model": ({"model_name": "m/m"}, {"model.name_or_path": "m/m"}),
    ":training": ({"max_steps": 5}, {"trainer.max_duration": "5steps"}),
    ":peft": ({"lora_r": 4}, {"model.lora.rank": 4}),
    ":fsdp": ({"enable_fsdp": True}, {"parallel.strategy": "fsdp"}),
    ":deepspeed": ({"enable_deepspeed": True, "zero_stage": "3"}, {"parallel.strategy": "fsdp"}),
    "model:tokenizer_name": ("tok/tok", {"tokenizer.kind": "pretrained", "tokenizer.path": "tok/tok"}),
    "model:torch_dtype_str": ("bfloat16", {"trainer.precision": "bf16"}),
    "model:chat_template": ("chatml", {"data.chat_template": "chatml"}),
    "model:model_kwargs": ({"rope_theta": 1000.0}, {"model.config_overrides.rope_theta": 1000.0}),
    "model:model_revision": ("abc123", {"model.load_kwargs.revision": "abc123"}),
    "data:train": ({"datasets": TWO[1:]}, sources("b.jsonl")),
    "data:validation": ({"datasets": TWO[1:]}, sources("b.jsonl", split="validation")),
    "data.<split>:datasets": (TWO, sources("a.jsonl", "b.jsonl")),
    "data.<split>:mixture_strategy": (
        {
            "datasets": [{**TWO[0], "mixture_proportion": 0.4}, {**TWO[1], "mixture_proportion": 0.6}],
            "mixture_strategy": "all_exhausted",
        },
        {
            "data.train.mixture": {"stop": "all_exhausted"},
            "data.train.sources": [
                {"path": "a.jsonl", "format": "conversation", "proportion": 0.4},
                {"path": "b.jsonl", "format": "conversation", "proportion": 0.6},
            ],
        },
    ),  # fmt: skip
    "data.<split>:seed": (
        {"datasets": [{**TWO[0], "mixture_proportion": 0.5}, {**TWO[1], "mixture_proportion": 0.5}], "seed": 3},
        {"data.train.mixture": {"stop": "first_exhausted", "seed": 3}},
    ),
    "data.<split>.datasets[]:mixture_proportion": (1.0, sources("train.jsonl")),  # one dataset: its own rows
    "data.<split>:collator_name": ("text_completions_only_with_padding", {"data.train_on": "assistant"}),
    "data.<split>:train_target": ("all_assistant_turns", {"data.train_on": "assistant"}),
    "data.<split>:collator_kwargs": (
        {"collator_name": "text_with_padding", "collator_kwargs": {"train_on_completions_only": True}},
        {"data.train_on": "assistant"},
    ),
    "training.gold:use_uld_loss": (False, {}),
    "data.<split>:pack": (True, {"method": "pretrain"}),
    "data.<split>:target_col": ("text", sources("train.jsonl", text_field="text")),
    "data.<split>.datasets[]:dataset_name": ("alpaca", {}),
    "data.<split>.datasets[]:dataset_path": ("c.jsonl", sources("c.jsonl")),
    "data.<split>.datasets[]:subset": (
        {"dataset_name": "openai/gsm8k", "dataset_path": None, "subset": "main"},
        {"data.train.sources": [{"path": "openai/gsm8k:train", "subset": "main"}]},
    ),
    "data.<split>.datasets[]:split": ("train[:5]", sources("train.jsonl", max_samples=5)),
    "data.<split>.datasets[]:sample_count": (4, sources("train.jsonl", max_samples=4)),
    "data.<split>.datasets[]:shuffle": (True, {}),  # data.shuffle is honing's default: a note says so
    "data.<split>.datasets[]:seed": (  # with shuffle and sample_count: a random subset by that seed
        {"seed": 3, "shuffle": True, "sample_count": 4},
        sources("train.jsonl", max_samples=4, sample_seed=3),
    ),
    "data.<split>.datasets[]:dataset_kwargs": ({"limit": 3}, sources("train.jsonl", max_samples=3)),
    "training:use_peft": (True, {"model.lora.target_modules": ["q_proj", "v_proj"]}),
    "training:trainer_type": ("TRL_DPO", {"method": "dpo"}),
    "training:enable_gradient_checkpointing": (True, {"parallel.activation_checkpointing": "full"}),
    "training:gradient_checkpointing_kwargs": ({"use_reentrant": False}, {}),
    "training:per_device_train_batch_size": (4, {"data.micro_batch_size": 4, "data.batch_size_per_rank": 4}),
    "training:gradient_accumulation_steps": (3, {"data.batch_size_per_rank": 24}),
    "training:max_steps": (7, {"trainer.max_duration": "7steps"}),
    "training:num_train_epochs": (2, {"trainer.max_duration": "2epochs"}),
    "training:data_seed": ({"seed": 7, "data_seed": 7}, {"trainer.seed": 7}),
    "training:reward_functions": (
        {"trainer_type": "TRL_GRPO", "reward_functions": ["countdown"]},
        {"grpo.rewards": [{"name": "countdown"}]},
    ),  # fmt: skip
    "training:grpo": ({"trainer_type": "TRL_GRPO", "grpo": {"temperature": 0.5}}, {"grpo.temperature": 0.5}),
    "training:gkd": (
        {"trainer_type": "TRL_GKD", "gkd": {"teacher_model_name_or_path": "t/t"}},
        {"distill.teacher_model_name_or_path": "t/t"},
    ),  # fmt: skip
    "training:gold": (
        {"trainer_type": "TRL_GOLD", "gold": {"teacher_model_name_or_path": "t/t"}},
        {"distill.teacher_model_name_or_path": "t/t"},
    ),  # fmt: skip
    "training:logging_strategy": (
        {"logging_strategy": "steps", "logging_steps": 5},
        {"callbacks.console.log_interval": 5},
    ),  # fmt: skip
    "training:eval_strategy": ({"eval_strategy": "steps", "eval_steps": 9}, {"callbacks.evaluator.interval": 9}),
    "training:eval_steps": ({"eval_strategy": "steps", "eval_steps": 9}, {"callbacks.evaluator.interval": 9}),
    "training:lr_scheduler_type": ("cosine", {"scheduler.name": "cosine"}),
    "training:lr_scheduler_kwargs": (
        {"lr_scheduler_type": "cosine_with_min_lr", "lr_scheduler_kwargs": {"min_lr_rate": 0.1}},
        {"scheduler.kwargs.min_lr_rate": 0.1},
    ),  # fmt: skip
    "training:optimizer": ("sgd", {"optim.name": "sgd"}),
    "training:adam_beta1": (0.8, {"optim.betas": [0.8, 0.999]}),
    "training:adam_beta2": (0.95, {"optim.betas": [0.9, 0.95]}),
    "training:sgd_momentum": ({"optimizer": "sgd", "sgd_momentum": 0.9}, {"optim.momentum": 0.9}),
    "training:mixed_precision_dtype": ("BF16", {"trainer.precision": "bf16-mixed"}),
    "training:resume_from_checkpoint": (
        "runs/x/step5",
        {"trainer.load_path": "runs/x/step5", "trainer.load_strategy": "always"},
    ),  # fmt: skip
    "training:try_resume_from_last_checkpoint": (True, {"trainer.load_strategy": "if_available"}),
    "training:trainer_kwargs": ({"max_length": 99}, {"data.seq_len": 99}),
    "training:verl_config_overrides": (
        {
            "trainer_type": "VERL_GRPO",
            "reward_functions": ["countdown"],
            "verl_config_overrides": {"data": {"train_batch_size": 16}},
        },
        {"data.global_batch_size": 16},
    ),  # fmt: skip
    "training:profiler": (
        {"profiler": {"enable_cpu_profiling": True, "schedule": SCHEDULE}},
        {"callbacks.profiler.enabled": True, "callbacks.profiler.start": 3},
    ),  # fmt: skip
    "training:nccl_default_timeout_minutes": (2, {"parallel.timeout_seconds": 120}),
    "training.grpo:max_prompt_length": (100, {"data.seq_len": 100 + 256}),
    "training.grpo:num_generations": (4, {"grpo.num_generations": 4}),
    "training.grpo:vllm_mode": ({"use_vllm": True, "vllm_mode": "server"}, {"grpo.vllm_mode": "server"}),
    "training.gkd:teacher_model_init_kwargs": (
        {"dtype": "bfloat16"},
        {"distill.teacher_model_init_kwargs.dtype": "bfloat16"},
    ),  # fmt: skip
    "training.gold:teacher_model_init_kwargs": (
        {"dtype": "bfloat16"},
        {"distill.teacher_model_init_kwargs.dtype": "bfloat16"},
    ),  # fmt: skip
    "training.gold:max_completion_length": (64, {"distill.max_new_tokens": 64}),
    "training.profiler:enable_cpu_profiling": (
        {"enable_cpu_profiling": True, "schedule": SCHEDULE},
        {"callbacks.profiler.enabled": True},
    ),  # fmt: skip
    "training.profiler:enable_cuda_profiling": (
        {"enable_cuda_profiling": True, "schedule": SCHEDULE},
        {"callbacks.profiler.enabled": True},
    ),  # fmt: skip
    "training.profiler:schedule": (
        {
            "enable_cpu_profiling": True,
            "schedule": {"enable_schedule": True, "skip_first": 0, "wait": 2, "warmup": 1, "active": 2},
        },
        {"callbacks.profiler.start": 4, "callbacks.profiler.stop": 5},
    ),  # fmt: skip
    "training.profiler.schedule:enable_schedule": (True, {"callbacks.profiler.enabled": True}),
    "training.profiler.schedule:skip_first": (5, {"callbacks.profiler.start": 5 + 0 + 1 + 1}),
    "training.profiler.schedule:wait": (5, {"callbacks.profiler.start": 1 + 5 + 1 + 1}),
    "training.profiler.schedule:warmup": (5, {"callbacks.profiler.start": 1 + 0 + 5 + 1}),
    "training.profiler.schedule:active": (5, {"callbacks.profiler.stop": 3 + 5 - 1}),
    "training.profiler.schedule:repeat": (1, {"callbacks.profiler.stop": 3 + 3 - 1}),  # only 1: 2 refused below
    "peft:lora_alpha": (16, {"model.lora.alpha": 16.0}),
    "peft:lora_exclude_modules": (
        {"lora_target_modules": ["q_proj", "k_proj"], "lora_exclude_modules": ["k_proj"]},
        {},
    ),  # fmt: skip
    "peft:lora_bias": ("all", {"model.lora.bias": "all"}),
    "peft:lora_init_weights": ("DEFAULT", {}),
    "peft:lora_task_type": ("CAUSAL_LM", {"model.lora.task_type": "CAUSAL_LM"}),
    "peft:q_lora": (True, {"model.quantize": "fp4"}),  # Oumi's default bnb_4bit_quant_type
    "peft:bnb_4bit_quant_type": ({"q_lora": True, "bnb_4bit_quant_type": "nf4"}, {"model.quantize": "nf4"}),
    "peft:q_lora_bits": ({"q_lora": True, "q_lora_bits": 8}, {"model.quantize": "int8"}),
    "peft:llm_int8_skip_modules": (
        {"q_lora": True, "llm_int8_skip_modules": ["out_proj"]},
        {"model.quantize": "fp4", "model.quantize_skip_modules": ["out_proj"]},
    ),
    "peft:peft_save_mode": ("MERGED", {}),
    "fsdp:enable_fsdp": (True, {"parallel.strategy": "fsdp"}),
    "fsdp:sharding_strategy": ("SHARD_GRAD_OP", {"parallel.reshard_after_forward": False}),
    "fsdp:cpu_offload": (True, {"parallel.offload": "params"}),
    "fsdp:mixed_precision": ("bf16", {"parallel.mixed_precision": "bf16", "trainer.precision": "bf16-mixed"}),
    "deepspeed:enable_deepspeed": ({"enable_deepspeed": True, "zero_stage": "0"}, {"parallel.strategy": "ddp"}),
    "deepspeed:zero_stage": ("2", {"parallel.strategy": "fsdp", "parallel.reshard_after_forward": False}),
    "deepspeed:offload_optimizer": ({"device": "cpu"}, {"parallel.offload": "optimizer"}),
    "deepspeed:offload_param": ({"device": "cpu"}, {"parallel.offload": "params"}),
    "deepspeed:precision": ("bf16", {"parallel.mixed_precision": "bf16"}),
    "deepspeed.offload_optimizer:device": ("cpu", {"parallel.offload": "optimizer"}),
    "deepspeed.offload_param:device": ("cpu", {"parallel.offload": "params"}),
}
# values that ask for something of a moot or refused key where the type's sample would be refused for its value
VALUES = {
    "model:device_map": "cpu",
    "model:tokenizer_kwargs": {"padding_side": "left", "use_fast": True},
    "training.grpo:remove_unused_columns": True,
    "training:enable_mlflow": True,
    "training:telemetry": {"track_gpu_temperature": True},
}


def base_for(group: str) -> dict:
    """``BASE`` as a config that reads ``group``'s keys."""
    raw = copy.deepcopy(BASE)
    if group in TRAINERS:
        raw["training"]["trainer_type"] = TRAINERS[group]
        if group == "training.grpo":
            raw["training"]["reward_functions"] = ["countdown"]
        else:
            raw["training"][group.split(".")[1]] = {"teacher_model_name_or_path": "t/t"}
    if group in ("peft", ""):
        raw["training"]["use_peft"] = True
    if group == "fsdp":
        raw["fsdp"] = {"enable_fsdp": True}
    if group.startswith("deepspeed"):
        raw["deepspeed"] = {"enable_deepspeed": True, "zero_stage": "3"}
    if group == "training.profiler.schedule":
        raw["training"]["profiler"] = {"enable_cpu_profiling": True, "schedule": {"enable_schedule": True}}
    return raw


def section(raw: dict, group: str) -> tuple[dict, str]:
    """The mapping of ``raw`` that holds ``group``'s keys (created), and its key path in messages."""
    if group == "":
        return raw, ""
    if group == "data.<split>":
        return raw["data"]["train"], "data.train"
    if group == "data.<split>.datasets[]":
        return raw["data"]["train"]["datasets"][0], "data.train.datasets[0]"
    node = raw
    for part in group.split("."):
        node = node.setdefault(part, {})
    return node, group


def sample(kind: str, default: str):
    """A value of a key's type that asks for something (not its default)."""
    value = schema_default(default)
    if kind.split(" | ")[0] == "bool":
        return not value if isinstance(value, bool) else True
    if kind.startswith("int"):
        return 3 if value != 3 else 4
    if kind.startswith("float"):
        return 0.25
    if kind.startswith("list"):
        return ["q_proj"]
    if kind.startswith("dict"):
        return {"made_up": 1}
    return "sample"


def translated(group: str, key: str, value):
    """The translation of ``base_for(group)`` with ``key`` set to ``value`` (a mapping naming ``key``: its keys)."""
    raw = base_for(group)
    node, prefix = section(raw, group)
    node.update(value if isinstance(value, dict) and key in value else {key: value})
    return translate(raw), f"{prefix}.{key}" if prefix else key


def cases(verdict: str) -> list[tuple[str, str]]:
    """(group, key) of every row with ``verdict``."""
    return [(group, key) for group, rows in oumi_table.TABLE.items() for key, (v, _) in rows.items() if v == verdict]


def ids(found: list[tuple[str, str]]) -> list[str]:
    """Test ids: group:key."""
    return [f"{group}:{key}" for group, key in found]


@pytest.mark.parametrize("group", list(KEYS))
def test_every_key_of_the_schema_has_a_verdict(group):
    keys, rows = set(KEYS[group]), set(oumi_table.TABLE[group])
    assert sorted(keys - rows) == [], f"{group}: keys of Oumi's dataclass without a verdict"
    assert sorted(rows - keys) == [], f"{group}: verdicts for keys the dataclass does not have"
    assert set(oumi_table.TABLE) == set(KEYS)


@pytest.mark.parametrize(("group", "key"), cases("honoured"), ids=ids(cases("honoured")))
def test_each_honoured_key_reaches_its_honing_key(group, key):
    kind, default = KEYS[group][key]
    name = f"{group}:{key}"
    if name in SPECIAL:
        value, expect = SPECIAL[name]
    else:
        value = sample(kind, default)
        expect = {oumi_table.TABLE[group][key][1].split(" ")[0]: value}
    translation, path = translated(group, key, value)
    assert translation.refused == [], translation.refused
    for honing_key, expected in expect.items():
        assert translation.get(honing_key) == expected, (honing_key, translation.config)


@pytest.mark.parametrize(("group", "key"), cases("refused"), ids=ids(cases("refused")))
def test_each_refused_key_set_is_refused_in_one_line_naming_it(group, key):
    value = VALUES.get(f"{group}:{key}", sample(*KEYS[group][key]))
    translation, path = translated(group, key, value)
    naming = [line for line in translation.refused if line.startswith(f"{path}:") or line.startswith(f"{path}.")]
    assert len(naming) == 1 and "\n" not in naming[0], translation.refused


@pytest.mark.parametrize(("group", "key"), cases("moot"), ids=ids(cases("moot")))
def test_each_moot_key_set_is_noted_not_refused(group, key):
    value = VALUES.get(f"{group}:{key}", sample(*KEYS[group][key]))
    translation, path = translated(group, key, value)
    assert translation.refused == [], translation.refused
    assert any(path in note or f"{path.rsplit('.', 1)[0]}: " in note for note in translation.notes), translation.notes


def test_the_profiler_repeats_one_window_only_and_needs_a_schedule():
    translation, _ = translated("training.profiler.schedule", "repeat", 2)
    assert translation.refused == ["training.profiler.schedule.repeat: 2: honing traces one window of steps "
                                   "(callbacks.profiler.start..stop); set 1"]  # fmt: skip
    translation, _ = translated("training.profiler", "enable_cuda_profiling", True)
    assert [line.split(":")[0] for line in translation.refused] == ["training.profiler"]


def test_a_key_oumi_does_not_have_is_refused_naming_the_schema():
    translation, _ = translated("training.telemetry", "track_gpu_temprature", True)
    assert translation.refused == [f"training.telemetry.track_gpu_temprature: not a key of {oumi_table.OUMI}'s "
                                   "schema; check its spelling"]  # fmt: skip


def test_the_counts(capsys):
    lines = []
    for group, rows in oumi_table.TABLE.items():
        found = counts(rows)
        lines.append(f"Oumi {group or 'TrainingConfig'}: {len(rows)} keys, {found['honoured']} honoured, "
                     f"{found['moot']} moot, {found['refused']} refused")  # fmt: skip
    with capsys.disabled():
        print("\n" + "\n".join(lines))
