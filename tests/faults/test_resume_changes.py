"""A resumed run does what its warning says: every change it allows is in force from the resumed step.

The checkpoint restores the optimizer's moments, never its settings; a change of the optimizer's layout (its
name, its groups) is refused in one line before anything loads, and nothing is moved aside. The saved runs are
4 steps of a tiny Llama with a 50-step warmup, so the LR at the resumed step 5 is ``lr x 5/50``; each test
resumes a copy of one saved run for one step with one key changed."""

import copy
import json
import logging
import shutil

import pytest
import torch

from honing.config import validate
from honing.errors import CheckpointMismatchError, ConfigError
from honing.recipes import PretrainRecipe
from honing.train import Checkpointer
from honing.train.config_change import RESTORED_STATE
from tests.faults.test_config_change import raw_config

WARMUP = 50


def base_config(tmp_path, max_duration="4steps", **optim):
    raw = raw_config(tmp_path, max_duration=max_duration)
    raw["optim"] = copy.deepcopy({"lr": 2.0e-3, **optim})
    raw["scheduler"] = {"name": "linear", "warmup_steps": WARMUP}
    return raw


def set_key(raw, key, value):
    """``raw`` with the dotted ``key`` set (``optim.param_groups.0.lr``: an index into a list)."""
    *parents, last = key.split(".")
    section = raw
    for part in parents:
        section = section[int(part)] if isinstance(section, list) else section.setdefault(part, {})
    if isinstance(section, list):
        section[int(last)] = value
    else:
        section[last] = value
    return raw


def lr_by_step(save_folder):
    rows = [json.loads(line) for line in (save_folder / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: row["optim/lr"] for row in rows if "optim/lr" in row}


GROUP = [{"params": "*embed_tokens*", "lr": 1.0e-2, "weight_decay": 0.05}]
SAVED_RUNS = {"adamw": {}, "groups": {"param_groups": GROUP}, "sgd": {"name": "sgd", "momentum": 0.9}}


@pytest.fixture(scope="module")
def saved_runs(tmp_path_factory):
    """One 4-step run per optimizer kind, saved once for the module; each test resumes a copy."""
    runs = {}
    for name, optim in SAVED_RUNS.items():
        folder = tmp_path_factory.mktemp(f"saved-{name}")
        PretrainRecipe(validate(base_config(folder, **optim))).run()
        runs[name] = folder
    return runs


def resumed_copy(saved_runs, kind, tmp_path):
    shutil.copytree(saved_runs[kind], tmp_path, dirs_exist_ok=True)
    return base_config(tmp_path, max_duration="5steps", **SAVED_RUNS[kind])


def resume(raw, caplog):
    with caplog.at_level(logging.WARNING):
        trainer = PretrainRecipe(validate(raw)).run()
    assert trainer.global_step == 5
    warnings = [r.getMessage() for r in caplog.records if "changed config" in r.getMessage()]
    assert len(warnings) == 1 and "in force from the resumed step" in warnings[0]
    return trainer, warnings[0]


def test_a_changed_lr_trains_at_the_new_lr_from_the_resumed_step(saved_runs, tmp_path, caplog):
    # the case: saved at 2e-3, resumed at 1e-4; step 5 of the warmup is 1e-4 x 5/50, not 2e-3 x 5/50
    raw = set_key(resumed_copy(saved_runs, "adamw", tmp_path), "optim.lr", 1.0e-4)
    trainer, warning = resume(raw, caplog)
    assert "optim.lr: 0.002 -> 0.0001" in warning
    lrs = lr_by_step(tmp_path / "run")
    assert lrs[4] == pytest.approx(2.0e-3 * 4 / WARMUP)  # the saved run's last step
    assert lrs[5] == pytest.approx(1.0e-4 * 5 / WARMUP)
    optimizer = trainer.train_module.optimizer
    assert {group["initial_lr"] for group in optimizer.param_groups} == {1.0e-4}
    # the moments did come from the checkpoint: AdamW has taken 5 steps, not 1
    assert {int(state["step"]) for state in optimizer.state.values()} == {5}


# (saved run, key, new value, the group setting it must reach, or the train module's attribute)
OPTIMIZER_SETTINGS = [
    ("adamw", "optim.weight_decay", 0.0, ("decay", "weight_decay", 0.0)),
    ("adamw", "optim.betas", [0.8, 0.9], ("decay", "betas", (0.8, 0.9))),
    ("adamw", "optim.eps", 1.0e-6, ("no_decay", "eps", 1.0e-6)),
    ("groups", "optim.param_groups.0.lr", 5.0e-3, ("param_groups.0", "initial_lr", 5.0e-3)),
    ("groups", "optim.param_groups.0.weight_decay", 0.01, ("param_groups.0", "weight_decay", 0.01)),
    ("sgd", "optim.momentum", 0.5, ("decay", "momentum", 0.5)),
]


@pytest.mark.parametrize("kind, key, value, expected", OPTIMIZER_SETTINGS, ids=[row[1] for row in OPTIMIZER_SETTINGS])
def test_a_changed_optimizer_setting_is_in_force_from_the_resumed_step(
    saved_runs, tmp_path, caplog, kind, key, value, expected
):
    raw = set_key(resumed_copy(saved_runs, kind, tmp_path), key, value)
    trainer, warning = resume(raw, caplog)
    assert key.split(".0.")[0] in warning
    group_name, setting, wanted = expected
    groups = {group["name"]: group for group in trainer.train_module.optimizer.param_groups}
    got = groups[group_name][setting]
    assert (tuple(got) if isinstance(got, (list, tuple)) else got) == pytest.approx(wanted)
    # and the step the run took used it: the resumed step differs from a resume without the change
    unchanged_folder = tmp_path / "unchanged"
    unchanged = PretrainRecipe(validate(resumed_copy(saved_runs, kind, unchanged_folder))).run()
    changed_weights = dict(trainer.train_module.model.named_parameters())
    assert any(
        not torch.equal(param, changed_weights[name]) for name, param in unchanged.train_module.model.named_parameters()
    )


@pytest.mark.parametrize(
    "keys, lr_at_5",
    [
        ({"scheduler.name": "constant", "scheduler.warmup_steps": 0}, 2.0e-3),
        ({"scheduler.warmup_steps": 4}, 2.0e-3 * 0.1),  # warmup done at 4, linear decay to 0.1 at step 5 of 5
        ({"scheduler.warmup_steps": 4, "scheduler.min_lr_ratio": 0.5}, 2.0e-3 * 0.5),
        # a later end of the schedule: step 5 of 12 after a 2-step warmup is 3/10 of the decay
        ({"scheduler.warmup_steps": 2, "trainer.max_duration": "12steps", "trainer.hard_stop": "5steps"}, 1.46e-3),
    ],
    ids=["constant", "warmup", "min-lr-ratio", "max-duration"],
)
def test_a_changed_schedule_gives_the_lr_of_the_new_schedule_at_the_resumed_step(
    saved_runs, tmp_path, caplog, keys, lr_at_5
):
    raw = resumed_copy(saved_runs, "adamw", tmp_path)
    for key, value in keys.items():
        set_key(raw, key, value)
    trainer, warning = resume(raw, caplog)
    assert all(key in warning for key in keys)
    assert lr_by_step(tmp_path / "run")[5] == pytest.approx(lr_at_5)
    assert trainer.train_module.current_lr_factor(5) * 2.0e-3 == pytest.approx(lr_at_5)


def test_a_changed_grad_clip_reaches_the_step(saved_runs, tmp_path, caplog):
    raw = set_key(resumed_copy(saved_runs, "adamw", tmp_path), "optim.grad_clip", 0.5)
    trainer, warning = resume(raw, caplog)
    assert "optim.grad_clip: 1.0 -> 0.5" in warning
    assert trainer.train_module.updater.grad_clip == 0.5


def test_a_changed_seed_reseeds_the_rng_and_says_so(saved_runs, tmp_path, caplog):
    raw = set_key(resumed_copy(saved_runs, "adamw", tmp_path), "trainer.seed", 7)
    saved = torch.load(tmp_path / "run" / "step4" / "train" / "rank0.pt", weights_only=True)
    assert saved["seed"] == 0
    resume(raw, caplog)
    messages = [r.getMessage() for r in caplog.records]
    assert any("trainer.seed changed since the checkpoint (0 → 7)" in m and "re-seeded" in m for m in messages)
    assert any("data seed changed since the checkpoint" in m for m in messages)


def test_an_unchanged_seed_restores_the_saved_rng(saved_runs, tmp_path, caplog):
    raw = resumed_copy(saved_runs, "adamw", tmp_path)
    with caplog.at_level(logging.WARNING):
        PretrainRecipe(validate(raw)).run()
    assert not any("re-seeded" in r.getMessage() for r in caplog.records)


def with_validation(raw, tmp_path, metric):
    raw["callbacks"]["evaluator"] = {"enabled": True, "interval": 2, "metric_for_best_model": metric}
    raw["data"]["validation"] = {"sources": [{"path": str(tmp_path / "corpus.txt")}]}
    return raw


def test_a_changed_best_model_metric_tracks_the_best_anew(tmp_path, caplog):
    PretrainRecipe(validate(with_validation(base_config(tmp_path), tmp_path, "eval/loss"))).run()
    raw = with_validation(base_config(tmp_path, max_duration="6steps"), tmp_path, "eval/token_accuracy")
    with caplog.at_level(logging.WARNING):
        trainer = PretrainRecipe(validate(raw)).run()
    assert any(
        "tracked by eval/loss (lower is better) and is now tracked by eval/token_accuracy (higher" in r.getMessage()
        for r in caplog.records
    )
    best = next(cb for cb in trainer.callbacks.values() if type(cb).__name__ == "BestModelCallback")
    assert best.metric == "eval/token_accuracy" and best.best_step == 6
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    accuracy = [row["eval/token_accuracy"] for row in rows if row.get("step") == 6 and "eval/token_accuracy" in row]
    assert best.best_value == pytest.approx(accuracy[0])
    # the old best (a step of eval/loss) is no longer kept past keep_last
    checkpointer = next(cb for cb in trainer.callbacks.values() if type(cb).__name__ == "CheckpointerCallback")
    assert checkpointer.protected_steps == {6}


@pytest.mark.parametrize(
    "kind, key, value",
    [
        ("adamw", "optim.name", "sgd"),
        ("adamw", "optim.name", "muon"),
        ("adamw", "optim.param_groups", GROUP),
        ("groups", "optim.param_groups.0.params", "*norm*"),
        ("groups", "optim.param_groups.0.weight_decay", None),  # one group becomes a decay / no-decay pair
    ],
    ids=["adamw-to-sgd", "adamw-to-muon", "a-group-added", "a-group-repatterned", "a-group-split"],
)
def test_a_changed_optimizer_layout_is_refused_in_one_line_and_nothing_moves(saved_runs, tmp_path, kind, key, value):
    raw = set_key(resumed_copy(saved_runs, kind, tmp_path), key, value)
    with pytest.raises(ConfigError) as raised:
        PretrainRecipe(validate(raw)).run()
    text = str(raised.value)
    assert "\n" not in text
    assert text.startswith(key.split(".0.")[0] + ": the checkpoint ")
    assert "trainer.load_optim_state: false" in text
    assert sorted(p.name for p in (tmp_path / "run").iterdir() if p.name.startswith("step")) == ["step2", "step4"]


def test_the_aliases_of_the_saved_optimizer_resume(saved_runs, tmp_path, caplog):
    raw = set_key(resumed_copy(saved_runs, "adamw", tmp_path), "optim.name", "adamw_torch")
    resume(raw, caplog)


def test_a_warm_start_from_another_optimizer_is_refused_not_moved_aside(saved_runs, tmp_path):
    # load_path is another run's: no config comparison, so the load itself finds the mismatch
    raw = base_config(tmp_path, max_duration="5steps", name="sgd")
    raw["trainer"]["load_path"] = str(saved_runs["adamw"] / "run")
    with pytest.raises(CheckpointMismatchError, match=r"trainer.load_optim_state: false"):
        PretrainRecipe(validate(raw)).run()
    assert [s for s, _ in Checkpointer.find_checkpoints(str(saved_runs["adamw"] / "run"))] == [2, 4]
    raw["trainer"]["load_optim_state"] = False
    raw["trainer"]["load_trainer_state"] = False
    trainer = PretrainRecipe(validate(raw)).run()
    assert trainer.global_step == 5


def test_what_a_checkpoint_restores_is_each_accounted_for(saved_runs):
    # a new piece of restored state can shadow a config key: it needs its line in RESTORED_STATE first
    folder = saved_runs["adamw"] / "run" / "step4"
    trainer_state = torch.load(folder / "train" / "rank0.pt", weights_only=True)
    restored = {"model", "optim"} | set(trainer_state)
    assert restored == set(RESTORED_STATE)
    for name in trainer_state["callbacks"]:
        assert name in RESTORED_STATE["callbacks"] or not trainer_state["callbacks"][name], name
