import json
import math
import logging
import os

import pytest
import torch

from honing.errors import CheckpointError
from honing.train import Callback, Checkpointer, LoadStrategy, StepSkipRange
from tests.helpers import flat_weights, make_trainer


def read_metrics(folder):
    with open(os.path.join(folder, "metrics.jsonl")) as handle:
        return [json.loads(line) for line in handle]


def test_fit_trains_logs_and_checkpoints(tmp_path):
    trainer = make_trainer(tmp_path, max_duration="12steps")
    before = flat_weights(trainer).clone()
    trainer.fit()
    assert trainer.global_step == 12
    assert trainer.global_train_tokens_seen == 12 * 8 * 16
    assert not torch.equal(before, flat_weights(trainer))
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == list(range(1, 13))
    for key in ("train/loss", "optim/lr", "optim/grad_norm"):
        assert all(key in r for r in rows), key
    # perplexity is derived from the logged loss, not recorded on the hot path
    assert all(r["train/perplexity"] == pytest.approx(math.exp(r["train/loss"])) for r in rows)
    assert rows[-1]["train/loss"] < rows[0]["train/loss"]
    assert [s for s, _ in Checkpointer.find_checkpoints(str(tmp_path))] == [4, 8, 12]


def test_exact_resume_after_hard_stop(tmp_path):
    reference = make_trainer(tmp_path / "ref", max_duration="12steps")
    reference.fit()
    stopped = make_trainer(tmp_path / "run", max_duration="12steps", hard_stop="6steps")
    stopped.fit()
    assert stopped.global_step == 6
    assert Checkpointer.latest_checkpoint(str(tmp_path / "run")).endswith("step6")
    # hard_stop must not change the schedule: LR at step 6 equals the reference's
    ref_rows, run_rows = read_metrics(tmp_path / "ref"), read_metrics(tmp_path / "run")
    assert run_rows[5]["optim/lr"] == ref_rows[5]["optim/lr"]
    resumed = make_trainer(tmp_path / "run", max_duration="12steps", init_seed=123)  # the load replaces the init
    resumed.fit()
    assert resumed.global_step == 12
    assert torch.equal(flat_weights(resumed), flat_weights(reference))


def test_exact_resume_with_async_saves(tmp_path):
    reference = make_trainer(tmp_path / "ref", max_duration="10steps", async_save=True, save_interval=3)
    reference.fit()
    stopped = make_trainer(tmp_path / "run", max_duration="10steps", hard_stop="7steps", async_save=True,
                           save_interval=3)
    stopped.fit()
    resumed = make_trainer(tmp_path / "run", max_duration="10steps", async_save=True, save_interval=3)
    resumed.fit()
    assert torch.equal(flat_weights(resumed), flat_weights(reference))


def test_resume_across_epoch_boundary(tmp_path):
    # 64 rows / 8 per batch = 8 batches per epoch; stop inside epoch 2
    reference = make_trainer(tmp_path / "ref", max_duration="2epochs")
    reference.fit()
    assert reference.global_step == 16
    stopped = make_trainer(tmp_path / "run", max_duration="2epochs", hard_stop="11steps")
    stopped.fit()
    resumed = make_trainer(tmp_path / "run", max_duration="2epochs")
    resumed.fit()
    assert resumed.global_step == 16
    assert torch.equal(flat_weights(resumed), flat_weights(reference))


def test_tokens_duration(tmp_path):
    trainer = make_trainer(tmp_path, max_duration=f"{5 * 8 * 16}tokens")
    assert trainer.max_steps == 5
    trainer.fit()
    assert trainer.global_step == 5


class CountCalls(Callback):
    def __init__(self):
        self.trained_steps = []

    def on_step_end(self):
        if self.trainer.get_metric("train/loss") is not None:
            self.trained_steps.append(self.step)


def test_steps_to_skip_consume_batches_without_training(tmp_path):
    counter = CountCalls()
    trainer = make_trainer(tmp_path, max_duration="8steps", steps_to_skip=[StepSkipRange(3, 6)],
                           callbacks={"count": counter})
    trainer.fit()
    assert counter.trained_steps == [1, 2, 6, 7, 8]
    assert trainer.global_train_tokens_seen == 8 * 8 * 16  # skipped batches are still consumed
    assert trainer.data_loader.batches_consumed == 8


class CancelAt(Callback):
    def __init__(self, step):
        self.cancel_step = step

    def on_step_end(self):
        if self.step == self.cancel_step:
            self.trainer.cancel_run("test asked to stop")


def test_cancel_finishes_step_and_saves(tmp_path):
    trainer = make_trainer(tmp_path, max_duration="12steps", callbacks={"cancel": CancelAt(5)})
    trainer.fit()
    assert trainer.canceled and trainer.cancel_reason == "test asked to stop"
    assert trainer.global_step == 5
    assert Checkpointer.latest_checkpoint(str(tmp_path)).endswith("step5")


def test_corrupt_latest_checkpoint_falls_back_to_previous(tmp_path, caplog):
    make_trainer(tmp_path, max_duration="8steps").fit()
    step8 = tmp_path / "step8" / "model_and_optim"
    for name in os.listdir(step8):
        if name.endswith(".distcp"):
            (step8 / name).write_bytes(b"garbage")
    trainer = make_trainer(tmp_path, max_duration="8steps")
    with caplog.at_level(logging.WARNING):
        assert trainer.maybe_load_checkpoint()
    assert trainer.global_step == 4
    assert any("skipping checkpoint" in r.message and "step8" in r.message for r in caplog.records)


def test_incomplete_checkpoint_is_ignored_and_cleaned(tmp_path, caplog):
    make_trainer(tmp_path, max_duration="8steps").fit()
    os.remove(tmp_path / "step8" / ".complete")
    trainer = make_trainer(tmp_path, max_duration="8steps")
    with caplog.at_level(logging.WARNING):
        assert trainer.maybe_load_checkpoint()
    assert trainer.global_step == 4
    assert not (tmp_path / "step8").exists()


def test_load_strategies(tmp_path):
    with pytest.raises(CheckpointError, match="load_strategy is 'always'"):
        make_trainer(tmp_path / "empty", load_strategy=LoadStrategy.always).fit()
    make_trainer(tmp_path / "run", max_duration="4steps").fit()
    fresh = make_trainer(tmp_path / "run", max_duration="4steps", load_strategy="never", save_overwrite=True)
    fresh.fit()
    assert fresh.global_step == 4  # trained from scratch rather than loading step4
    other = make_trainer(tmp_path / "other", max_duration="6steps", load_path=str(tmp_path / "run"))
    other.fit()
    assert other.global_step == 6
    assert [s for s, _ in Checkpointer.find_checkpoints(str(tmp_path / "other"))] == [6]


class RecordTwice(Callback):
    def on_step_end(self):
        self.trainer.record_metric("custom/value", self.step, merge_strategy="sum")
        self.trainer.record_metric("value", 1.0, namespace="custom", merge_strategy="sum")


def test_record_metric_reaches_the_log(tmp_path):
    make_trainer(tmp_path, max_duration="4steps", callbacks={"twice": RecordTwice()}).fit()
    rows = read_metrics(tmp_path)
    assert [r["custom/value"] for r in rows] == [2.0, 3.0, 4.0, 5.0]


class Stateful(Callback):
    def __init__(self):
        self.count = 0

    def on_step_end(self):
        self.count += 1

    def state_dict(self):
        return {"count": self.count}

    def load_state_dict(self, state_dict):
        self.count = state_dict["count"]


def test_callback_state_is_checkpointed(tmp_path):
    make_trainer(tmp_path, max_duration="8steps", hard_stop="4steps", callbacks={"stateful": Stateful()}).fit()
    resumed_callback = Stateful()
    make_trainer(tmp_path, max_duration="8steps", callbacks={"stateful": resumed_callback}).fit()
    assert resumed_callback.count == 8


class StepCounter(Callback):
    """Overrides two events only: the trainer calls just the events a callback overrides."""

    def __init__(self):
        self.ends = 0
        self.logged_steps = []

    def on_step_end(self):
        self.ends += 1

    def on_log(self, step, metrics):
        self.logged_steps.append(step)


def test_events_reach_callbacks_added_after_the_first_emit(tmp_path):
    first, late = StepCounter(), StepCounter()
    trainer = make_trainer(tmp_path, max_duration="3steps", callbacks={"first": first})
    trainer._emit("on_log", 0, {})  # builds the handler lists before "late" exists
    trainer.add_callback("late", late)
    trainer.fit()
    assert (first.ends, late.ends) == (3, 3)
    assert first.logged_steps == [0, 1, 2, 3] and late.logged_steps == [1, 2, 3]
