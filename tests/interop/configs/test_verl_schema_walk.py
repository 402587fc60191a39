"""verl's PPO trainer config walked key by key (``key_table("verl")``, the leaves of verl's
``_generated_ppo_trainer.yaml``), as an Oumi ``VERL_GRPO`` config's ``training.verl_config_overrides``: every key
has a row in ``verl_table`` and no row names another key; each honoured key, set alone to a value other than its
default, becomes the honing key its row names with the value it means; each refused key set is refused in one line
naming it; each moot key set is noted, never refused; a key at verl's own default asks for nothing."""

from __future__ import annotations

import copy

import pytest

from honing.interop.configs import translate, verl_table
from honing.interop.configs.schema_table import counts, schema_default
from tests.interop.configs.test_oumi_document import VERL_GRPO

PREFIX = "training.verl_config_overrides"
ACTOR = "actor_rollout_ref.actor"
VAL = "actor_rollout_ref.rollout.val_kwargs"
MODEL = "actor_rollout_ref.model"
OPTIM = "actor_rollout_ref.actor.optim"
# honoured keys whose translation is not "the row's honing key = the value": key -> ({verl key: value}, {key: value})
SPECIAL = {
    "data.max_prompt_length": ({"data.max_prompt_length": 100, "data.max_response_length": 60}, {"data.seq_len": 160}),
    "data.val_batch_size": ({"data.val_batch_size": 4}, {"callbacks.evaluator.batch_size": 4}),
    "data.train_files": ({"data.train_files": "a.parquet"}, {"data.train.sources": [{"path": "a.parquet"}]}),
    "data.val_files": ({"data.val_files": ["v.parquet"]}, {"data.validation.sources": [{"path": "v.parquet"}]}),
    "actor_rollout_ref.rollout.name": ({"actor_rollout_ref.rollout.name": "hf"}, {"grpo.use_vllm": None}),
    f"{VAL}.temperature": ({f"{VAL}.temperature": 0.7, f"{VAL}.do_sample": True}, {"grpo.validation.temperature": 0.7}),
    f"{VAL}.do_sample": ({f"{VAL}.temperature": 0.7, f"{VAL}.do_sample": False}, {"grpo.validation.temperature": 0.0}),
    f"{ACTOR}.use_kl_loss": ({f"{ACTOR}.use_kl_loss": True}, {"grpo.kl_estimator": "low_var_kl"}),
    f"{ACTOR}.kl_loss_type": (
        {f"{ACTOR}.use_kl_loss": True, f"{ACTOR}.kl_loss_type": "mse"},
        {"grpo.kl_estimator": "k2"},
    ),  # fmt: skip
    f"{ACTOR}.ppo_mini_batch_size": ({f"{ACTOR}.ppo_mini_batch_size": 32}, {"grpo.steps_per_generation": 128 // 32}),
    f"{ACTOR}.ppo_micro_batch_size_per_gpu": (
        {"actor_rollout_ref.rollout.n": 4, f"{ACTOR}.ppo_micro_batch_size_per_gpu": 8},
        {"data.micro_batch_size": 2},
    ),  # fmt: skip
    f"{ACTOR}.loss_agg_mode": ({f"{ACTOR}.loss_agg_mode": "seq-mean-token-mean"}, {"grpo.loss_type": "grpo"}),
    "algorithm.adv_estimator": ({"algorithm.adv_estimator": "grpo"}, {"method": "grpo"}),
    "algorithm.norm_adv_by_std_in_grpo": ({"algorithm.norm_adv_by_std_in_grpo": False}, {"grpo.scale_rewards": "none"}),
    "actor_rollout_ref.model.enable_gradient_checkpointing": (
        {"actor_rollout_ref.model.enable_gradient_checkpointing": True},
        {"parallel.activation_checkpointing": "full"},
    ),  # fmt: skip
    "trainer.total_training_steps": ({"trainer.total_training_steps": 7}, {"trainer.max_duration": "7steps"}),
    "trainer.total_epochs": ({"trainer.total_epochs": 2}, {"trainer.max_duration": "2epochs"}),
    "data.seed": ({"data.seed": 7}, {"trainer.seed": 7}),
    "data.tokenizer": ({"data.tokenizer": "tok"}, {"tokenizer.path": "tok", "tokenizer.kind": "pretrained"}),
    f"{MODEL}.tokenizer_path": ({f"{MODEL}.tokenizer_path": "tok"}, {"tokenizer.path": "tok"}),
    f"{MODEL}.override_config": (
        {f"{MODEL}.override_config": {"attention_dropout": 0.0}},
        {"model.config_overrides": {"attention_dropout": 0.0}},
    ),  # fmt: skip
    f"{MODEL}.lora_rank": ({f"{MODEL}.lora_rank": 32}, {"model.lora.rank": 32, "model.lora.alpha": 16.0}),
    f"{MODEL}.lora_alpha": ({f"{MODEL}.lora_rank": 8, f"{MODEL}.lora_alpha": 32}, {"model.lora.alpha": 32.0}),
    f"{MODEL}.target_modules": (
        {f"{MODEL}.lora_rank": 8, f"{MODEL}.target_modules": ["q_proj"]},
        {"model.lora.target_modules": ["q_proj"]},
    ),  # fmt: skip
    "trainer.resume_mode": ({"trainer.resume_mode": "disable"}, {"trainer.load_strategy": "never"}),
    "trainer.resume_from_path": (
        {"trainer.resume_mode": "resume_path", "trainer.resume_from_path": "ckpt/step9"},
        {"trainer.load_path": "ckpt/step9", "trainer.load_strategy": "always"},
    ),  # fmt: skip
    f"{OPTIM}.betas": ({f"{OPTIM}.betas": [0.9, 0.95]}, {"optim.betas": [0.9, 0.95]}),
    # verl's warmup: int(ratio x steps) from 0, then constant (verl.utils.torch_functional)
    f"{OPTIM}.lr_warmup_steps": (
        {f"{OPTIM}.lr_warmup_steps": 5},
        {"scheduler.warmup_steps": 5, "scheduler.name": "constant_with_warmup", "scheduler.semantics": "transformers"},
    ),  # fmt: skip
    f"{OPTIM}.lr_warmup_steps_ratio": (
        {"trainer.total_training_steps": 30, f"{OPTIM}.lr_warmup_steps_ratio": 0.25},
        {"scheduler.warmup_steps": 7},
    ),  # fmt: skip
    f"{OPTIM}.lr_scheduler_type": ({f"{OPTIM}.lr_scheduler_type": "cosine"}, {"scheduler.name": "cosine"}),
    f"{OPTIM}.warmup_style": ({f"{OPTIM}.warmup_style": "cosine"}, {"scheduler.name": "cosine"}),
    f"{OPTIM}.min_lr_ratio": (
        {f"{OPTIM}.lr_scheduler_type": "cosine", f"{OPTIM}.min_lr_ratio": 0.1},
        {"scheduler.name": "cosine_with_min_lr", "scheduler.kwargs": {"num_cycles": 0.5, "min_lr_rate": 0.1}},
    ),  # fmt: skip
    f"{OPTIM}.num_cycles": (
        {f"{OPTIM}.lr_scheduler_type": "cosine", f"{OPTIM}.num_cycles": 1.0},
        {"scheduler.kwargs": {"num_cycles": 1.0}},
    ),  # fmt: skip
    f"{OPTIM}.optimizer": ({f"{OPTIM}.optimizer": "SGD"}, {"optim.name": "sgd", "optim.momentum": 0.0}),
    f"{OPTIM}.override_optimizer_config": (
        {f"{OPTIM}.override_optimizer_config": {"eps": 1e-6}},
        {"optim.eps": 1e-6},
    ),  # fmt: skip
    f"{ACTOR}.freeze_vision_tower": ({f"{ACTOR}.freeze_vision_tower": True}, {"model.freeze_vision": None}),  # text
    f"{ACTOR}.policy_loss.loss_mode": (
        {f"{ACTOR}.policy_loss.loss_mode": "gspo", f"{ACTOR}.loss_agg_mode": "token-mean"},
        {"grpo.loss_type": "grpo", "grpo.importance_sampling_level": "sequence_token"},
    ),  # fmt: skip
    f"{ACTOR}.tau_pos": (
        {f"{ACTOR}.policy_loss.loss_mode": "sapo", f"{ACTOR}.tau_pos": 2.0},
        {"grpo.loss_type": "sapo", "grpo.sapo_temperature_pos": 2.0},
    ),  # fmt: skip
    f"{ACTOR}.tau_neg": (
        {f"{ACTOR}.policy_loss.loss_mode": "sapo", f"{ACTOR}.tau_neg": 2.0},
        {"grpo.sapo_temperature_neg": 2.0},
    ),  # fmt: skip
    "actor_rollout_ref.rollout.multi_turn.format": (
        {"actor_rollout_ref.rollout.multi_turn.format": "hermes"},
        {"grpo.tool_call_format": "hermes"},
    ),  # fmt: skip
    "actor_rollout_ref.rollout.prompt_length": (
        {"actor_rollout_ref.rollout.prompt_length": 100, "data.max_response_length": 60},
        {"data.seq_len": 160},
    ),  # fmt: skip
    "actor_rollout_ref.rollout.response_length": (
        {"actor_rollout_ref.rollout.response_length": 60, "data.max_response_length": 50},
        {"grpo.max_completion_length": 60},
    ),  # fmt: skip
    "custom_reward_function.path": (
        {"custom_reward_function.path": "pkg://my.rewards"},
        {"grpo.rewards": [{"name": "verl:my.rewards:compute_score"}]},
    ),  # fmt: skip
    "custom_reward_function.name": (
        {"custom_reward_function.path": "rewards/score.py", "custom_reward_function.name": "score"},
        {"grpo.rewards": [{"name": "verl:rewards.score:score"}]},
    ),  # fmt: skip
    "trainer.max_actor_ckpt_to_keep": ({"trainer.max_actor_ckpt_to_keep": 2}, {"callbacks.checkpointer.keep_last": 2}),
    "actor_rollout_ref.rollout.multi_turn.max_assistant_turns": (
        {"actor_rollout_ref.rollout.multi_turn.max_assistant_turns": 3},
        {"grpo.max_turns": 3},
    ),  # fmt: skip
    "trainer.logger": (
        {"trainer.logger": ["tensorboard"]},
        {"callbacks.tensorboard.enabled": True, "callbacks.wandb.enabled": False},
    ),  # fmt: skip
}


def nested(flat: dict) -> dict:
    """Dotted verl keys as verl's nested sections."""
    out: dict = {}
    for key, value in flat.items():
        node = out
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def translated(flat: dict):
    """The Oumi document's ``VERL_GRPO`` (train_batch_size 128) with the verl keys of ``flat`` added."""
    raw = copy.deepcopy(VERL_GRPO)
    raw["training"]["verl_config_overrides"] = nested({"data.train_batch_size": 128, **flat})
    return translate(raw)


def sample(kind: str, default: str):
    """A value of a key's type that asks for something (not its default)."""
    value = schema_default(default)
    if kind == "bool":
        return not value
    if kind == "int":
        return 3 if value != 3 else 4
    if kind == "float":
        return 0.25 if value != 0.25 else 0.3
    if kind == "list":
        return ["x"]
    if kind == "dict":
        return {"made_up": 1}
    return "sample"


def cases(verdict: str) -> list[str]:
    """The keys of every row with ``verdict``."""
    return [key for key, (found, _) in verl_table.TABLE.items() if found == verdict]


def test_every_key_of_the_schema_has_a_verdict_and_no_row_names_another():
    assert set(verl_table.TABLE) == set(verl_table.KEYS)
    assert sorted(set(verl_table.ROWS) - set(verl_table.KEYS)) == []
    assert all(verdict in ("honoured", "moot", "refused") and why for verdict, why in verl_table.TABLE.values())


@pytest.mark.parametrize("key", cases("honoured"))
def test_each_honoured_key_reaches_its_honing_key(key):
    if key in SPECIAL:
        flat, expect = SPECIAL[key]
    else:
        value = sample(*verl_table.KEYS[key])
        flat, expect = {key: value}, {verl_table.TABLE[key][1].split(" ")[0]: value}
    translation = translated(flat)
    assert translation.refused == [], translation.refused
    for honing_key, expected in expect.items():
        assert translation.get(honing_key) == expected, (honing_key, translation.config)


@pytest.mark.parametrize("key", cases("refused"))
def test_each_refused_key_set_is_refused_in_one_line_naming_it(key):
    translation = translated({key: sample(*verl_table.KEYS[key])})
    naming = [line for line in translation.refused if line.startswith(f"{PREFIX}.{key}: ")]
    assert len(naming) == 1 and "\n" not in naming[0], translation.refused


@pytest.mark.parametrize("key", cases("moot"))
def test_each_moot_key_set_is_noted_not_refused(key):
    translation = translated({key: sample(*verl_table.KEYS[key])})
    assert translation.refused == [], translation.refused
    assert any(note.startswith(f"{PREFIX}.{key}: ") for note in translation.notes), translation.notes


def test_a_key_at_verls_default_asks_for_nothing_and_a_key_verl_lacks_is_refused_by_name():
    translation = translated({"actor_rollout_ref.rollout.gpu_memory_utilization": 0.5, "trainer.resume_mode": "auto"})
    assert (translation.refused, translation.notes) == ([], translated({}).notes)
    translation = translated({"actor_rollout_ref.actor.ppo_epoch": 2})
    assert translation.refused == [f"{PREFIX}.actor_rollout_ref.actor.ppo_epoch: 2: not a key of verl's "
                                   f"ppo_trainer.yaml ({verl_table.SOURCE}); check its spelling"]  # fmt: skip


def test_the_counts(capsys):
    found = counts(verl_table.TABLE)
    with capsys.disabled():
        print(f"\nverl ppo_trainer.yaml: {len(verl_table.TABLE)} keys, {found['honoured']} honoured, "
              f"{found['moot']} moot, {found['refused']} refused")  # fmt: skip
