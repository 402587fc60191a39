import pytest

from honing.train import Callback, Checkpointer
from honing.train.callbacks.best_model import BestModelCallback, BestModelExportCallback, lower_is_better
from honing.train.callbacks.checkpointer import CheckpointerCallback
from honing.train.metrics import ReduceType
from tests.helpers import make_trainer


class ScriptedEval(Callback):
    """Records a scripted validation value at chosen steps, as the evaluator would."""

    priority = 200

    def __init__(self, name, values):
        self.name, self.values = name, values

    def on_step_end(self):
        if self.step in self.values:
            self.trainer.record_metric(self.name, self.values[self.step], ReduceType.max)


def saved_steps(folder):
    return [step for step, _ in Checkpointer.find_checkpoints(str(folder))]


def run(tmp_path, name, values, greater_is_better=None, max_duration="12steps"):
    checkpointer = CheckpointerCallback(save_interval=4, keep_last=1, async_save=True)
    exported = []
    best = BestModelCallback(
        checkpointer,
        metric=name,
        greater_is_better=greater_is_better,
        export_fn=lambda checkpoint, out: exported.append((checkpoint, out)),
    )
    trainer = make_trainer(
        tmp_path,
        max_duration=max_duration,
        callbacks={
            "checkpointer": checkpointer,
            "eval": ScriptedEval(name, values),
            "best": best,
            "best_export": BestModelExportCallback(best),
        },
    )
    trainer.fit()
    return trainer, best, exported


def test_best_checkpoint_is_saved_off_interval_kept_past_keep_last_and_exported(tmp_path):
    trainer, best, exported = run(tmp_path, "eval/loss", {3: 0.5, 6: 0.3, 9: 0.4, 12: 0.35})
    assert (best.best_step, best.best_value) == (6, 0.3)
    # 6 is not a save step: it was saved for being the best; keep_last=1 keeps 12; 3 (the first
    # best, released when 6 beat it), 4 and 8 are gone
    assert saved_steps(tmp_path) == [6, 12]
    assert exported == [(trainer.checkpoint_dir(6), str(tmp_path / "best"))]


def test_greater_is_better_for_accuracies_and_best_at_the_last_step(tmp_path):
    trainer, best, exported = run(tmp_path, "eval/token_accuracy", {4: 0.2, 8: 0.1, 12: 0.7})
    assert best.best_step == 12 and best.greater_is_better
    assert saved_steps(tmp_path) == [12]
    assert exported[0][0] == trainer.checkpoint_dir(12)


def test_explicit_direction_overrides_the_name():
    assert lower_is_better("eval/loss") and lower_is_better("eval/perplexity")
    assert not lower_is_better("eval/exact_match")
    callback = BestModelCallback(CheckpointerCallback(save_interval=1), metric="eval/loss", greater_is_better=True)
    callback.best_value = 1.0
    assert callback.is_better(2.0) and not callback.is_better(0.5) and not callback.is_better(float("nan"))


def test_best_state_survives_resume(tmp_path):
    run(tmp_path, "eval/loss", {3: 0.5, 6: 0.3}, max_duration="8steps")
    # resume to 12 steps: the later values never beat 0.3, so step 6 stays the best and is exported
    trainer, best, exported = run(tmp_path, "eval/loss", {9: 0.4, 12: 0.35}, max_duration="12steps")
    assert best.best_step == 6 and best.best_value == pytest.approx(0.3)
    assert 6 in saved_steps(tmp_path)
    assert exported[0][0] == trainer.checkpoint_dir(6)
