"""TRL's config classes and transformers' ``TrainingArguments`` walked field by field, as installed
(``dataclasses.fields``): every field has a verdict (a field TRL or transformers gains fails here until its table gives
it one), the generated ``schema_keys/trl.json`` matches the installed classes, and each honoured field, set alone to a
value other than its default, reaches the honing key its row names with the value it means."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from honing.config import validate
from honing.interop.configs.key_tables import key_table
from honing.interop.configs.schema_table import counts, schema_default
from honing.interop.configs.trl_args import CLASSES, table, translate_trl_args
from honing.interop.configs.trl_method_keys import class_fields

trl_keys_from_installed = pytest.importorskip("tests.interop.configs.trl_keys_from_installed")

# honoured keys whose translation is not "the row's honing key = the value": key -> (value, {honing key: value})
SPECIAL = {
    "per_device_train_batch_size": (4, {"data.micro_batch_size": 4, "data.batch_size_per_rank": 4}),
    "gradient_accumulation_steps": (3, {"data.micro_batch_size": 8, "data.batch_size_per_rank": 24}),
    "num_train_epochs": (2.0, {"trainer.max_duration": "2epochs"}),
    "max_steps": (7, {"trainer.max_duration": "7steps"}),
    "loss_weights": ({"loss_type": ["sigmoid", "sft"], "loss_weights": [1, 0.5]}, {"dpo.loss_weights": [1.0, 0.5]}),
    "lr_scheduler_type": ("cosine", {"scheduler.name": "cosine", "scheduler.semantics": "transformers"}),
    "lr_scheduler_kwargs": (
        {"lr_scheduler_type": "cosine", "lr_scheduler_kwargs": {"num_cycles": 0.25}},
        {"scheduler.kwargs.num_cycles": 0.25},
    ),
    "warmup_steps": (0.1, {"scheduler.warmup_ratio": 0.1}),
    "optim": ("sgd", {"optim.name": "sgd"}),
    "adam_beta1": (0.8, {"optim.betas": [0.8, 0.999]}),
    "adam_beta2": (0.95, {"optim.betas": [0.9, 0.95]}),
    "max_grad_norm": (0.5, {"optim.grad_clip": 0.5}),
    "bf16": (False, {"trainer.precision": None}),
    "fp16": (True, {"trainer.precision": "fp16-mixed"}),
    "gradient_checkpointing": (False, {"parallel.activation_checkpointing": "none"}),
    "activation_checkpointing": (False, {"parallel.activation_checkpointing": "none"}),
    "logging_strategy": ({"logging_strategy": "steps", "logging_steps": 25}, {"callbacks.console.log_interval": 25}),
    "logging_steps": (25, {"callbacks.console.log_interval": 25}),
    "report_to": (["wandb", "tensorboard"], {"callbacks.wandb.enabled": True, "callbacks.tensorboard.enabled": True}),
    "project": ({"report_to": "wandb", "project": "proj"}, {"callbacks.wandb.project": "proj"}),
    "eval_strategy": ("steps", {"callbacks.evaluator.interval": None}),  # the class's logging_steps: below
    "eval_steps": ({"eval_strategy": "steps", "eval_steps": 30}, {"callbacks.evaluator.interval": 30}),
    "save_strategy": ("no", {"callbacks.checkpointer.save_interval": 10**9}),
    "save_steps": (50, {"callbacks.checkpointer.save_interval": 50}),
    "data_seed": ({"seed": 7, "data_seed": 7}, {"trainer.seed": 7}),
    "push_to_hub": ({"push_to_hub": True, "output_dir": "runs/mine"}, {"callbacks.hub.repo_id": "mine"}),
    "hub_model_id": ({"push_to_hub": True, "hub_model_id": "me/run"}, {"callbacks.hub.repo_id": "me/run"}),
    "hub_strategy": (
        {"push_to_hub": True, "hub_model_id": "me/run", "hub_strategy": "checkpoint"},
        {"callbacks.hub.strategy": "checkpoint"},
    ),
    "hub_private_repo": (
        {"push_to_hub": True, "hub_model_id": "me/run", "hub_private_repo": True},
        {"callbacks.hub.private": True},
    ),
    "hub_revision": (
        {"push_to_hub": True, "hub_model_id": "me/run", "hub_revision": "dev"},
        {"callbacks.hub.revision": "dev"},
    ),
    "use_cpu": (True, {"trainer.device": "cpu"}),
    "train_sampling_strategy": ("sequential", {"data.shuffle": False}),
    "ddp_timeout": (60, {"parallel.timeout_seconds": 60.0}),
    "fsdp": ("full_shard", {"parallel.strategy": "fsdp"}),
    "fsdp_config": (
        {"fsdp": "full_shard", "fsdp_config": {"reshard_after_forward": False}},
        {"parallel.reshard_after_forward": False},
    ),
    "deepspeed": ({"zero_optimization": {"stage": 3}}, {"parallel.strategy": "fsdp"}),
    "resume_from_checkpoint": (
        "runs/x/step10",
        {"trainer.load_path": "runs/x/step10", "trainer.load_strategy": "always"},
    ),  # fmt: skip
    "model_init_kwargs": ({"revision": "main"}, {"model.load_kwargs": {"revision": "main"}}),
    "precompute_ref_log_probs": (True, {}),  # dpo.reference / kto.reference: checked below
    "loss_type": (None, {}),  # per class below
    "assistant_only_loss": (True, {"data.train_on": "assistant"}),
    "completion_only_loss": (False, {"data.train_on": "all"}),
    "truncation_mode": ("keep_start", {"data.overlong": "truncate"}),
    "scale_rewards": (False, {"grpo.scale_rewards": "none"}),
    "max_tool_calling_iterations": (2, {"grpo.max_turns": 3}),
    "reward_clip_range": ([-1, 1], {"rloo.reward_clip_range": [-1.0, 1.0]}),
    "teacher_model_init_kwargs": ({"dtype": "bfloat16"}, {"distill.teacher_model_init_kwargs": {"dtype": "bfloat16"}}),
    "vllm_mode": ("server", None),  # per class: <section>.vllm_mode
    "activation_checkpointing_kwargs": (
        {"every_n_layers": 2, "offload": True},
        {
            "parallel.activation_checkpointing": "every_n",
            "parallel.activation_checkpointing_every": 2,
            "parallel.activation_offload": True,
        },
    ),  # fmt: skip
    "gradient_checkpointing_kwargs": ({"every_n_layers": 3}, {"parallel.activation_checkpointing_every": 3}),
    "torch_compile_backend": ("inductor", {"parallel.compile": True}),
    "torch_compile_mode": ("default", {"parallel.compile": True}),
    "eval_on_start": (True, {"callbacks.evaluator.before_training": True}),
    "parallelism_config": ({"dp_shard_size": 2, "tp_size": 2}, {"parallel.dp_shard": 2, "parallel.tp": 2}),
    "optim_args": ({"optim": "sgd", "optim_args": "momentum=0.5"}, {"optim.name": "sgd", "optim.momentum": 0.5}),
    "chat_template_kwargs": ({"enable_thinking": False}, {"data.chat_template_kwargs": {"enable_thinking": False}}),
}
# honoured keys of GRPOConfig / RLOOConfig whose honing key is under the class's section: key -> (value, {key: value})
ONLINE = {
    "reward_weights": ([1.0, 0.5], {"reward_weights": [1.0, 0.5]}),
    "num_generations_eval": (4, {"validation.num_generations": 4, "validation.temperature": 1.0}),
    "generation_kwargs": ({"top_k": 20, "max_new_tokens": 64}, {"top_k": 20, "max_completion_length": 64}),
}
# loss types other than the default that honing has, per class
LOSSES = {"DPOConfig": (["ipo"], "dpo.loss_type", "ipo"), "KTOConfig": ("apo_zero_unpaired", "kto.loss_type", None),
          "CPOConfig": ("simpo", "cpo.loss_type", None), "GRPOConfig": ("grpo", "grpo.loss_type", None),
          "SFTConfig": ("nll", None, None), "GKDConfig": ("nll", None, None)}  # fmt: skip
REFERENCE = {"DPOConfig": "dpo.reference", "KTOConfig": "kto.reference"}


def online_batch(config_class: str, key: str) -> tuple[int, dict]:
    """GRPOConfig's / RLOOConfig's batch keys count completions per device: a value TRL takes on one process, and
    the prompts per rank (per micro-batch) it becomes (``trl_grpo_batch``)."""
    per_device, generations = (class_fields(config_class)[name][1] for name in ("per_device_train_batch_size",
                                                                                 "num_generations"))  # fmt: skip
    per_device, generations = int(schema_default(per_device)), int(schema_default(generations))
    if key == "per_device_train_batch_size":
        return 2 * per_device, {"data.batch_size_per_rank": 2 * per_device // generations}
    if key == "gradient_accumulation_steps":
        return 3, {"data.batch_size_per_rank": 3 * per_device // generations}
    return per_device // 2, {"data.batch_size_per_rank": 2}  # num_generations


def test_the_generated_keys_are_the_installed_classes():
    assert key_table("trl").keys == trl_keys_from_installed.groups(), (
        "run tests/interop/configs/trl_keys_from_installed.py"
    )


@pytest.mark.parametrize("config_class", list(CLASSES))
def test_every_installed_field_has_a_verdict(config_class):
    installed = {field.name for field in dataclasses.fields(trl_keys_from_installed.installed_class(config_class))
                 if field.init}  # fmt: skip
    rows = table(config_class)
    assert sorted(installed - set(rows)) == [], f"{config_class}: fields without a verdict"
    assert sorted(set(rows) - installed) == [], f"{config_class}: verdicts for fields it does not have"
    assert all(verdict in ("honoured", "moot", "refused") and why for verdict, why in rows.values())


def sample(kind: str, default_text: str):
    """A value of a field's type that asks for something (not its default)."""
    value = schema_default(default_text)
    if kind == "bool" or "bool" in kind.split(" | ")[0]:
        return not value if isinstance(value, bool) else True
    if kind.startswith("int") or kind == "int | None":
        return 3 if value != 3 else 4
    if kind.startswith("float"):
        return 0.25 if value != 0.25 else 0.3
    return "sample"


def honoured_cases() -> list[tuple[str, str]]:
    """(class, key) for every honoured field of every class."""
    return [(name, key) for name in CLASSES for key, (verdict, _) in table(name).items() if verdict == "honoured"]


@pytest.mark.parametrize("config_class, key", honoured_cases(), ids=[f"{c}.{k}" for c, k in honoured_cases()])
def test_each_honoured_field_reaches_its_honing_key(config_class, key, tmp_path):
    kind, default_text = class_fields(config_class)[key]
    section = {"GRPOConfig": "grpo", "RLOOConfig": "rloo"}.get(config_class)
    if key == "chat_template_path":
        template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
        (tmp_path / "template.jinja").write_text(template)
        value, expect = str(tmp_path / "template.jinja"), {"data.chat_template": template}
    elif section and key in ONLINE:
        value, under = ONLINE[key]
        expect = {f"{section}.{path}": expected for path, expected in under.items()}
    elif key == "loss_type":
        value, path, expected = LOSSES[config_class]
        expect = {path: expected if expected is not None else value} if path else {}
    elif key == "precompute_ref_log_probs":
        value, expect = True, {REFERENCE[config_class]: "precompute"}
    elif key == "vllm_mode":
        value, expect = "server", {f"{section}.vllm_mode": "server"}
    elif key == "use_vllm":  # beside TRL's default vllm_mode, colocate: honing's own decoder (test_vllm_colocate.py)
        value, expect = True, {f"{section}.use_vllm": False}
    elif key == "eval_strategy":
        logging = int(schema_default(class_fields(config_class)["logging_steps"][1]))
        value, expect = "steps", {"callbacks.evaluator.interval": logging}
    elif section and key in ("per_device_train_batch_size", "gradient_accumulation_steps", "num_generations"):
        value, expect = online_batch(config_class, key)
    elif key in SPECIAL:
        value, expect = SPECIAL[key]
    elif key == "generation_batch_size":  # on one process: 2 per-device batches of TRL's 8 completions
        value, expect = 16, {f"{section}.steps_per_generation": 2}
    else:
        path = table(config_class)[key][1].split(" ")[0]
        value = sample(kind, default_text)
        expect = {path: value}
    values = value if key in SPECIAL and isinstance(value, dict) and key in value else {key: value}
    processes = 1 if key == "generation_batch_size" else None  # the launcher's count, which it needs
    translation = translate_trl_args(copy.deepcopy(values), config_class, processes)  # a DeepSpeed mapping is popped
    assert translation.refused == []
    for path, expected in expect.items():
        assert translation.get(path) == expected and path not in translation.defaults, (path, translation.config)


@pytest.mark.parametrize("config_class", list(CLASSES))
def test_every_refused_field_set_is_refused_naming_it(config_class):
    for key, (verdict, _) in table(config_class).items():
        if verdict != "refused" or key in ("neftune_noise_alpha", "router_aux_loss_coef", "data_seed"):
            continue
        kind, default_text = class_fields(config_class)[key]
        translation = translate_trl_args({key: sample(kind, default_text)}, config_class)
        assert any(line.startswith(f"{key}: ") for line in translation.refused), (key, translation.refused)


def test_a_key_the_class_does_not_have_is_refused_naming_the_class():
    translation = translate_trl_args({"bta": 0.2}, "DPOConfig")
    assert translation.refused == [f"bta: not a field of DPOConfig ({SOURCE()}); check its spelling"]


def SOURCE() -> str:  # noqa: N802
    """The versions the keys were read from."""
    return key_table("trl").source


def test_a_dpo_config_with_a_model_and_rows_validates():
    translation = translate_trl_args({"beta": 0.2, "learning_rate": 5e-7, "max_steps": 3, "max_length": 64,
                                      "per_device_train_batch_size": 2}, "DPOConfig")  # fmt: skip
    raw = translation.config
    raw["model"]["name_or_path"] = "tiny"
    raw["data"]["train"] = {"sources": [{"path": "generated:addition_preference?samples=8&seed=0"}]}
    config = validate(raw, source="<trl>")
    assert (config.dpo.beta, config.optim.lr, config.data.seq_len) == (0.2, 5e-7, 64)


def test_the_counts(capsys):
    lines = []
    for name in CLASSES:
        found = counts(table(name))
        lines.append(f"{name}: {sum(found.values())} fields, {found['honoured']} honoured, {found['moot']} moot, "
                     f"{found['refused']} refused")  # fmt: skip
    with capsys.disabled():
        print("\n" + "\n".join(lines))


def test_the_docs_page_is_the_tables():
    from pathlib import Path

    from honing.interop.configs.trl_keys_page import REGENERATE, page

    written = Path(__file__).resolve().parents[3] / "docs" / "reference" / "trl-keys.md"
    assert written.read_text(encoding="utf-8") == page(), f"regenerate: {REGENERATE}"


def test_every_test_the_page_names_exists():
    from pathlib import Path

    from honing.interop.configs.trl_key_tests import FEATURE_TESTS, WALK

    root = Path(__file__).resolve().parents[3]
    for test in {WALK, *(name for tests in FEATURE_TESTS.values() for name in tests)}:
        path, _, function = test.partition("::")
        assert f"def {function}(" in (root / path).read_text(encoding="utf-8"), test
