from __future__ import annotations

import gc

import pytest

from honing.train.callbacks.gc import GarbageCollectorCallback


@pytest.fixture(autouse=True)
def restore_gc():
    was_enabled = gc.isenabled()
    yield
    (gc.enable if was_enabled else gc.disable)()


def start(make_trainer, interval=100):
    trainer = make_trainer()
    trainer.add_callback("garbage_collector", GarbageCollectorCallback(interval=interval))
    trainer.emit("on_train_begin")
    return trainer


def test_gc_is_off_during_training_and_back_on_after(make_trainer):
    gc.enable()
    trainer = start(make_trainer)
    assert not gc.isenabled()
    trainer.emit("on_train_end")
    assert gc.isenabled()


def test_gc_is_restored_when_training_fails(make_trainer):
    gc.enable()
    trainer = start(make_trainer)
    trainer.emit("on_error", RuntimeError("boom"))
    assert gc.isenabled()


def test_gc_that_was_off_stays_off(make_trainer):
    gc.disable()
    trainer = start(make_trainer)
    trainer.emit("on_train_end")
    assert not gc.isenabled()


def test_collects_the_young_generations_every_interval(make_trainer, monkeypatch):
    collected = []
    monkeypatch.setattr(gc, "collect", lambda generation=2: collected.append(generation) or 0)
    trainer = start(make_trainer, interval=3)
    collected.clear()  # the clean start at train begin
    for step in range(1, 8):
        trainer.global_step = step
        trainer.emit("on_step_end")
        if step in (3, 6):
            assert collected == [1] * (step // 3)
    assert collected == [1, 1]


def test_interval_must_be_positive():
    with pytest.raises(ValueError, match="interval"):
        GarbageCollectorCallback(interval=0)
