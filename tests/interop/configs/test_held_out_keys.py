"""Keys users' own axolotl / LLaMA-Factory / Oumi files set that were refused (benchmarks/held_out_configs.py) and
now reach honing's own features: the loss watchdog, the Hub push, the older eval_strategy name, save_only_model,
DPO's loss lists and LD-DPO, and a file written for `oumi train` with keys Oumi lacks."""

from __future__ import annotations

import copy

import pytest

from honing.config import validate
from honing.interop.configs import translate

AXOLOTL = {
    "base_model": "Qwen/Qwen2.5-0.5B",
    "datasets": [{"path": "data/alpaca.jsonl", "type": "alpaca"}],
    "learning_rate": 1e-5,
    "output_dir": "./out/my-run",
}
LLAMAFACTORY = {
    "model_name_or_path": "Qwen/Qwen2.5-0.5B",
    "stage": "sft",
    "dataset": "x",
    "dataset_dir": "ONLINE",
    "output_dir": "saves/qwen-sft",
}


def translated(base: dict, **keys):
    raw = copy.deepcopy(base)
    raw.update(keys)
    return translate(raw)


def valid(t):
    assert t.refused == []
    return validate(t.config)


def test_axolotls_loss_watchdog_is_callbacks_loss_watchdog():
    config = valid(translated(AXOLOTL, loss_watchdog_threshold=5.0, loss_watchdog_patience=4))
    assert (config.callbacks.loss_watchdog.threshold, config.callbacks.loss_watchdog.patience) == (5.0, 4)
    config = valid(translated(AXOLOTL, loss_watchdog_threshold=15))
    assert config.callbacks.loss_watchdog.patience == 3  # axolotl's `patience or 3`
    t = translated(AXOLOTL, loss_watchdog_patience=3)
    assert valid(t).callbacks.loss_watchdog.threshold is None
    assert any(note.startswith("loss_watchdog_patience: unused without") for note in t.notes)


def test_axolotls_hub_model_id_pushes_a_lora_runs_adapter_by_its_strategy():
    lora = {"adapter": "lora", "lora_r": 8, "lora_alpha": 16, "lora_target_linear": True}
    config = valid(translated(AXOLOTL, **lora, hub_model_id="me/run", hub_strategy="checkpoint"))
    hub = config.callbacks.hub
    assert (hub.repo_id, hub.strategy, hub.folder, hub.private) == ("me/run", "checkpoint", "adapter", False)
    t = translated(AXOLOTL, hub_model_id="me/run")  # transformers' default every_save: the final export, noted
    assert (valid(t).callbacks.hub.strategy, valid(t).callbacks.hub.folder) == ("end", "hf")
    assert any(note.startswith("hub_strategy (default): 'every_save'") for note in t.notes)
    t = translated(AXOLOTL, hub_strategy="end")
    assert valid(t).callbacks.hub.repo_id is None and any("unused without a push" in note for note in t.notes)
    assert translated(AXOLOTL, hub_model_id="me/run", hub_strategy="sometimes").refused[0].startswith("hub_strategy")


def test_llamafactorys_push_to_hub_names_the_repository_as_transformers_does():
    config = valid(translated(LLAMAFACTORY, push_to_hub=True, hub_private_repo=True, hub_strategy="all_checkpoints"))
    hub = config.callbacks.hub
    assert (hub.repo_id, hub.strategy, hub.private, hub.folder) == ("qwen-sft", "all_checkpoints", True, "adapter")
    t = translated(LLAMAFACTORY, hub_model_id="me/run")
    assert valid(t).callbacks.hub.repo_id is None and any(note.startswith("hub_model_id: unused") for note in t.notes)


def test_the_older_evaluation_strategy_is_read_as_eval_strategy_and_save_only_model_is_a_note():
    t = translated(LLAMAFACTORY, evaluation_strategy="steps", eval_steps=50, val_size=0.1, save_only_model=True)
    assert valid(t).callbacks.evaluator.interval == 50
    assert any(note.startswith("evaluation_strategy: the older name") for note in t.notes)
    assert any(note.startswith("save_only_model: not needed") for note in t.notes)
    t = translated(LLAMAFACTORY, evaluation_strategy="steps", eval_strategy="no")
    assert [line.split(":")[0] for line in t.refused] == ["evaluation_strategy"]
    t = translated(AXOLOTL, evaluation_strategy="no", val_set_size=0.1)
    assert valid(t).callbacks.evaluator.enabled is False


def test_a_fractional_eval_steps_of_a_run_in_epochs_is_the_evaluators_interval_fraction():
    config = valid(translated(AXOLOTL, num_epochs=2, eval_steps=0.05, val_set_size=0.1))
    assert config.callbacks.evaluator.interval_fraction == 0.05
    config = valid(translated(AXOLOTL, max_steps=30, eval_steps=0.05, save_steps=0.5, val_set_size=0.1))
    assert (config.callbacks.evaluator.interval, config.callbacks.checkpointer.save_interval) == (2, 15)  # ceil
    assert translated(AXOLOTL, num_epochs=1, save_steps=0.5).refused[0].startswith("save_steps: 0.5: a ratio")
    t = translated(LLAMAFACTORY, num_train_epochs=3.0, eval_strategy="steps", eval_steps=0.1, val_size=0.1)
    assert valid(t).callbacks.evaluator.interval_fraction == 0.1


def test_dpo_loss_lists_weights_weighting_and_ld_alpha_reach_the_dpo_section():
    dpo = {"rl": "dpo", "datasets": [{"path": "data/pairs.jsonl", "type": "chat_template.default"}]}
    t = translated(AXOLOTL, **dpo, dpo_loss_type=["sigmoid", "bco_pair"], dpo_loss_weights=[0.8, 0.2],
                   dpo_use_weighting=True)  # fmt: skip
    config = valid(t)
    assert (config.dpo.loss_type, config.dpo.loss_weights, config.dpo.use_weighting) == (
        ["sigmoid", "bco_pair"],
        [0.8, 0.2],
        True,
    )
    assert translated(AXOLOTL, dpo_use_weighting=True).refused[0].startswith("dpo_use_weighting: unused by method")
    config = valid(translated(LLAMAFACTORY, stage="dpo", ld_alpha=0.5))
    assert config.dpo.ld_alpha == 0.5
    assert translated(LLAMAFACTORY, stage="dpo", pref_loss="simpo", ld_alpha=0.5).refused[0].startswith("ld_alpha")


OUMI_SHAPED = {
    "model": {"name": "Qwen/Qwen2.5-0.5B-Instruct", "dtype": "bfloat16"},
    "train": {"task": "grpo", "steps": 50},
    "dataset": {"train_path": "train.jsonl"},
    "output_dir": "outputs",
}


def test_a_file_for_oumi_train_with_keys_oumi_lacks_is_refused_naming_them():
    t = translate(copy.deepcopy(OUMI_SHAPED))
    assert t.dialect == "Oumi"
    assert [line.split(":")[0] for line in t.refused] == ["model.name", "model.dtype", "train", "dataset", "output_dir"]


@pytest.mark.parametrize(
    "raw",
    [
        {"model": {"name_or_path": "m"}, "trainr": {"max_duration": "2steps"}},  # a honing config, misspelt section
        {"method": "sft", "model": {"name": "m"}, "train": {}},  # honing's own top-level key: honing's check
    ],
)
def test_a_honing_config_with_a_misspelling_is_not_taken_for_oumis(raw):
    assert translate(raw) is None
