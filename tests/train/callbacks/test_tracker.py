"""The tracker base: rank 0 only, config redacted, a failure warns once and switches it off."""

from __future__ import annotations

import logging

from honing.train.callbacks import tracker
from honing.train.callbacks.tracker import TrackerCallback


class RecordingTracker(TrackerCallback):
    """Records what the base asks of it; ``fail_on`` names the call that raises."""

    backend = "recorder"

    def __init__(self, fail_on=None, **kwargs):
        super().__init__(**kwargs)
        self.calls = []
        self.fail_on = fail_on

    def _call(self, name, *args):
        self.calls.append((name, *args))
        if name == self.fail_on:
            raise OSError(f"{name} broke")

    def start(self):
        self._call("start")

    def log_metrics(self, step, metrics):
        self._call("log", step)

    def finish(self, *, failed):
        self._call("finish", failed)


def drive(trainer, callback, steps=3):
    trainer.add_callback("recorder", callback)
    trainer.emit("on_train_begin")
    for step in range(1, steps + 1):
        trainer.emit("on_log", step, {"train/loss": 1.0})
    trainer.emit("on_train_end")


def test_rank0_starts_logs_and_finishes(make_trainer):
    callback = RecordingTracker(config={"wandb": {"api_key": "s3cret"}, "seed": 1})
    drive(make_trainer(), callback)
    assert callback.config == {"wandb": {"api_key": "***"}, "seed": 1}
    assert callback.calls == [("start",), ("log", 1), ("log", 2), ("log", 3), ("finish", False)]


def test_other_ranks_do_nothing(make_trainer, monkeypatch):
    monkeypatch.setattr(tracker, "is_rank0", lambda: False)
    callback = RecordingTracker()
    drive(make_trainer(), callback)
    assert callback.calls == []


def test_a_failure_warns_once_closes_the_run_and_stops_calls(make_trainer, caplog):
    callback = RecordingTracker(fail_on="log")
    with caplog.at_level(logging.WARNING):
        drive(make_trainer(), callback)
    assert callback.calls == [("start",), ("log", 1), ("finish", True)]
    assert [r.getMessage() for r in caplog.records] == [
        "recorder logging failed (OSError: log broke); recorder logging is off for the rest of this run, "
        "training goes on and metrics.jsonl is complete"
    ]
