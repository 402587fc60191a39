import json
import logging
import math
import os

import pytest
import torch

from honing.errors import CheckpointError, ConfigError
from honing.train import Callback, Checkpointer, LoadStrategy, StepSkipRange
from honing.train.callbacks.evaluator import EvaluatorCallback
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
    stopped = make_trainer(
        tmp_path / "run", max_duration="10steps", hard_stop="7steps", async_save=True, save_interval=3
    )
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
    trainer = make_trainer(
        tmp_path, max_duration="8steps", steps_to_skip=[StepSkipRange(3, 6)], callbacks={"count": counter}
    )
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


def test_add_callback_refuses_a_name_already_registered(tmp_path):
    trainer = make_trainer(tmp_path, callbacks={"stateful": Stateful()})
    with pytest.raises(ConfigError, match="'stateful' is already registered"):
        trainer.add_callback("stateful", Stateful())
    assert trainer.has_callback("stateful") and trainer.has_callback(Stateful)
    assert trainer.has_callback(Callback)  # a subclass counts, as isinstance does
    assert not trainer.has_callback("missing") and not trainer.has_callback(StepCounter)


class AtTrainBegin(Callback):
    """What the run looks like once fit() has loaded (or not loaded) a checkpoint."""

    def __init__(self):
        self.seen = None
        self.weights = {}

    def on_train_begin(self):
        trainer = self.trainer
        self.seen = {
            "step": trainer.global_step,
            "tokens": trainer.global_train_tokens_seen,
            "batches_consumed": trainer.data_loader.batches_consumed,
            "optimizer_state": len(trainer.train_module.optimizer.state),
            "weights": flat_weights(trainer).clone(),
            "stateful": trainer.callbacks["stateful"].count,
        }

    def on_step_end(self):
        self.weights[self.step] = flat_weights(self.trainer).clone()


def warm_start_source(tmp_path):
    snapshot = AtTrainBegin()
    make_trainer(
        tmp_path / "a", max_duration="8steps", save_interval=4, callbacks={"snapshot": snapshot, "stateful": Stateful()}
    ).fit()
    return snapshot.weights[4]


def test_warm_start_takes_the_weights_but_not_the_step_data_position_or_optimizer(tmp_path):
    weights_at_4 = warm_start_source(tmp_path)
    seen = AtTrainBegin()
    run = make_trainer(
        tmp_path / "b",
        max_duration="6steps",
        load_path=str(tmp_path / "a" / "step4"),
        load_trainer_state=False,
        init_seed=123,
        callbacks={"seen": seen, "stateful": Stateful()},
    )
    run.fit()
    assert torch.equal(seen.seen["weights"], weights_at_4)  # exactly the checkpoint's weights
    assert seen.seen["step"] == 0 and seen.seen["tokens"] == 0 and seen.seen["batches_consumed"] == 0
    assert seen.seen["stateful"] == 0  # callback states are this run's too
    assert seen.seen["optimizer_state"] == 0  # a fresh optimizer: no moments, no step count
    assert run.global_step == 6 and run.last_checkpoint_step == 6
    assert [s for s, _ in Checkpointer.find_checkpoints(str(tmp_path / "b"))] == [4, 6]


@pytest.mark.parametrize("key", ["load_trainer_state", "load_optim_state"])
def test_a_warm_start_setting_without_load_path_is_refused_naming_the_key(tmp_path, key):
    with pytest.raises(ConfigError, match=rf"trainer.{key}: .*trainer.load_path is not set"):
        make_trainer(tmp_path, **{key: False})


def test_load_optim_state_false_keeps_the_step_with_a_fresh_optimizer(tmp_path):
    weights_at_4 = warm_start_source(tmp_path)
    seen = AtTrainBegin()
    run = make_trainer(
        tmp_path / "b",
        max_duration="8steps",
        load_path=str(tmp_path / "a" / "step4"),
        load_optim_state=False,
        init_seed=123,
        callbacks={"seen": seen, "stateful": Stateful()},
    )
    run.fit()
    assert torch.equal(seen.seen["weights"], weights_at_4)
    assert seen.seen["step"] == 4 and seen.seen["batches_consumed"] == 4 and seen.seen["stateful"] == 4
    assert seen.seen["optimizer_state"] == 0
    assert run.global_step == 8


def test_the_optimizer_goes_with_the_trainer_state_unless_load_optim_state_says(tmp_path):
    warm_start_source(tmp_path)
    full, warm_with_optimizer = AtTrainBegin(), AtTrainBegin()
    make_trainer(
        tmp_path / "b",
        max_duration="8steps",
        load_path=str(tmp_path / "a" / "step4"),
        callbacks={"seen": full, "stateful": Stateful()},
    ).fit()
    assert full.seen["step"] == 4 and full.seen["optimizer_state"] > 0
    make_trainer(
        tmp_path / "c",
        max_duration="2steps",
        load_path=str(tmp_path / "a" / "step4"),
        load_trainer_state=False,
        load_optim_state=True,
        callbacks={"seen": warm_with_optimizer, "stateful": Stateful()},
    ).fit()
    assert warm_with_optimizer.seen["step"] == 0 and warm_with_optimizer.seen["optimizer_state"] > 0


def test_a_warm_started_run_resumes_from_its_own_checkpoints_in_full(tmp_path):
    warm_start_source(tmp_path)
    options = dict(
        max_duration="8steps", load_path=str(tmp_path / "a" / "step4"), load_trainer_state=False, load_optim_state=False
    )
    make_trainer(
        tmp_path / "b", hard_stop="6steps", save_interval=3, callbacks={"stateful": Stateful()}, **options
    ).fit()
    seen = AtTrainBegin()
    resumed = make_trainer(tmp_path / "b", save_interval=3, callbacks={"seen": seen, "stateful": Stateful()}, **options)
    resumed.fit()
    # its own save folder wins over load_path, and restores everything (as OLMo-core)
    assert seen.seen["step"] == 6 and seen.seen["stateful"] == 6 and seen.seen["optimizer_state"] > 0
    assert resumed.global_step == 8


def test_no_checkpoints_neither_loads_nor_saves(tmp_path):
    make_trainer(tmp_path, max_duration="4steps").fit()
    trainer = make_trainer(
        tmp_path / "bench",
        max_duration="6steps",
        no_checkpoints=True,
        load_path=str(tmp_path / "step4"),
        load_strategy="always",
    )
    trainer.fit()
    assert trainer.global_step == 6  # from scratch: nothing was loaded, even with load_strategy always
    assert Checkpointer.find_checkpoints(str(tmp_path / "bench")) == []
    assert trainer.last_checkpoint_step is None
    trainer.no_checkpoints = False  # switched back on: the checkpointer gets events again
    assert trainer.callbacks["checkpointer"] in [h.__self__ for h in trainer._handlers_for("on_step_end")]


class CountingEvaluator(EvaluatorCallback):
    def __init__(self):
        super().__init__(batches=[], interval=1)
        self.calls = 0

    def evaluate(self):
        self.calls += 1
        return {}


def test_no_evals_turns_the_evaluators_off(tmp_path):
    evaluator = CountingEvaluator()
    trainer = make_trainer(tmp_path / "off", max_duration="3steps", no_evals=True, callbacks={"eval": evaluator})
    trainer.fit()
    assert evaluator.calls == 0 and trainer.no_evals
    evaluator = CountingEvaluator()
    make_trainer(tmp_path / "on", max_duration="3steps", callbacks={"eval": evaluator}).fit()
    assert evaluator.calls >= 3


def test_batch_and_token_properties(tmp_path):
    # 64 rows of 16 tokens, 8 rows per global batch: 128 tokens a step, 8 steps an epoch
    trainer = make_trainer(tmp_path, max_duration="12steps")
    assert trainer.data_loader.global_batch_size == 8  # the loader counts rows; the trainer, tokens
    assert (trainer.global_batch_size, trainer.rank_batch_size) == (128, 128)
    assert (trainer.steps_per_epoch, trainer.tokens_per_epoch) == (8, 1024)
    assert trainer.max_tokens == 12 * 128
    trainer.fit()
    assert trainer.max_tokens == trainer.global_train_tokens_seen == 12 * 128
    assert make_trainer(tmp_path / "e", max_duration="2epochs").max_tokens == 2 * 1024
    assert make_trainer(tmp_path / "t", max_duration="1000tokens").max_tokens == 1000
    varying = make_trainer(tmp_path / "v", max_duration="2epochs")
    varying.data_loader.dataset.tokens_per_row = None  # rows of varying length: no fixed token count
    assert varying.global_batch_size is None and varying.rank_batch_size is None
    assert varying.tokens_per_epoch is None and varying.max_tokens is None
    assert varying.steps_per_epoch == 8
