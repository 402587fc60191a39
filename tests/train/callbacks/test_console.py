from __future__ import annotations

import io
import threading

import pytest
from rich.live import Live

from honing.train.callbacks import console as console_module
from honing.train.callbacks.base import Callback
from honing.train.callbacks.console import ConsoleCallback


@pytest.fixture
def run(make_trainer, clock, monkeypatch):
    """Train with a ConsoleCallback: each step takes 2 s and 1,000 tokens; logs arrive every 10 steps."""
    monkeypatch.setattr(console_module, "time", clock)

    def start(stop_step=30, metrics_collect_interval=10, **kwargs):
        stream = kwargs.pop("stream", io.StringIO())
        trainer = make_trainer(stop_step=stop_step, metrics_collect_interval=metrics_collect_interval)
        callback = trainer.add_callback("console", ConsoleCallback(stream=stream, **kwargs))
        trainer.emit("on_train_begin")

        def steps(count, extra=None):
            first = trainer.global_step + 1
            for _ in range(count):
                trainer.global_step += 1
                trainer.global_train_tokens_seen += 1000
                clock.now += 2.0
            for step in range(first, trainer.global_step + 1):
                metrics = {"train/loss": 3.0 - step / 100, "optim/lr": 3e-4, "throughput/tokens_per_s": 12345.4}
                metrics.update((extra or {}).get(step, {}))
                trainer.emit("on_log", step, metrics)

        return trainer, callback, stream, steps

    return start


def test_plain_lines_every_collect_interval_with_the_numbers(run):
    trainer, _, stream, steps = run()
    steps(10)
    assert stream.getvalue().splitlines() == ["step 10/30 | loss 2.9000 | lr 3.00e-04 | 12,345 tok/s | eta 0:00:40"]
    steps(10, extra={15: {"eval/loss": 2.4}})
    steps(10)
    trainer.emit("on_train_end")
    lines = stream.getvalue().splitlines()
    assert lines[1:] == [
        "step 15/30 | loss 2.8500 | lr 3.00e-04 | 12,345 tok/s | eta 0:00:20 | eval/loss 2.4000",
        "step 20/30 | loss 2.8000 | lr 3.00e-04 | 12,345 tok/s | eta 0:00:20",
        "step 30/30 | loss 2.7000 | lr 3.00e-04 | 12,345 tok/s | eta 0:00:00",
        "done: 30 steps | 30,000 tokens | 0:01:00 | final loss 2.7000 | saved in /tmp/run",
    ]
    assert "\x1b" not in stream.getvalue()


def test_reward_and_preference_accuracy_follow_the_loss(run):
    _, _, stream, steps = run()
    steps(10, extra={10: {"train/reward": 1.2345, "train/rewards/accuracies": 0.75}})
    assert stream.getvalue().splitlines() == [
        "step 10/30 | loss 2.9000 | reward 1.2345 | accuracy 0.7500 | lr 3.00e-04 | 12,345 tok/s | eta 0:00:40"
    ]


def test_log_interval_and_a_last_step_off_the_interval(run):
    # an unknown stop step (a token duration) still ends with the last logged step
    trainer, _, stream, steps = run(stop_step=None, log_interval=4)
    steps(10)
    trainer.emit("on_train_end")
    lines = stream.getvalue().splitlines()
    assert [line.split(" | ")[0] for line in lines[:-1]] == ["step 4", "step 8", "step 10"]
    assert "eta" not in lines[0]
    assert lines[-1].startswith("done: 10 steps | 10,000 tokens | 0:00:20 | final loss 2.9000")


def test_only_rank0_prints(run, monkeypatch):
    monkeypatch.setattr(console_module, "is_rank0", lambda: False)
    trainer, _, stream, steps = run()
    steps(10)
    trainer.emit("on_train_end")
    assert stream.getvalue() == ""


def test_plain_is_chosen_by_whether_the_stream_is_a_terminal(make_trainer):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    for stream, live in ((io.StringIO(), False), (Terminal(), True)):
        trainer = make_trainer(stop_step=5)
        callback = trainer.add_callback("console", ConsoleCallback(stream=stream))
        trainer.emit("on_train_begin")
        assert (callback._progress is not None) == live
        trainer.emit("on_train_end")


def live_threads():
    """Rich's refresh threads still running: a stopped display's thread exits within one refresh."""
    threads = [t for t in threading.enumerate() if type(t).__module__ == Live.__module__]
    for thread in threads:
        thread.join(timeout=2)
    return [t for t in threads if t.is_alive()]


def test_rich_mode_renders_the_bar_and_stops_cleanly(run, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")  # a StringIO has no width; the default 80 would cut the bar
    trainer, callback, stream, steps = run(stop_step=20, plain=False)
    checkpointer = Callback()
    checkpointer.save_interval = 5
    trainer.add_callback("checkpointer", checkpointer)
    assert callback.console.is_terminal
    steps(10, extra={10: {"eval/loss": 2.5}})
    steps(2)
    trainer.canceled = True
    trainer.emit("on_train_end")
    assert not live_threads()
    output = stream.getvalue()
    assert "\x1b" in output  # a terminal rendering
    assert "step 12/20" in output
    assert "ckpt @ 15" in output
    assert "step 10/20 | loss 2.9000" in output and "eval/loss 2.5000" in output  # printed above the bar
    assert "stopped: 12 steps | 12,000 tokens | 0:00:24 | final loss 2.8800" in output


def test_rich_mode_stops_on_error(run):
    trainer, callback, stream, steps = run(plain=False)
    steps(3)
    trainer.emit("on_error", RuntimeError("boom"))
    assert not live_threads()
    assert callback.console.is_terminal


def test_rich_mode_redraws_the_bar_at_the_evaluated_step_below_its_line(run, monkeypatch):
    # the line printed above the bar redraws it: at its last refresh it said step 0/3 (issue 45)
    monkeypatch.setenv("COLUMNS", "160")
    trainer, _, stream, steps = run(stop_step=3, plain=False)
    steps(3, extra={3: {"eval/loss": 2.5}})
    output = stream.getvalue()
    trainer.emit("on_train_end")
    after_eval = output[output.index("eval/loss 2.5000") :]
    assert "step 3/3" in after_eval
    assert "step 0/3" not in after_eval
