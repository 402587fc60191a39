"""The profiler callback: its schedule by training step, and a real trace of steps 2..3."""

from __future__ import annotations

import glob
import json
import os

import pytest
from torch.profiler import ProfilerAction

from honing.train.callbacks.profiler import ProfilerCallback
from tests.helpers import make_trainer as make_run


def test_schedule_warms_up_the_step_before_start_and_saves_at_stop():
    callback = ProfilerCallback(start=3, stop=5)
    assert [callback.action_for(step) for step in range(1, 8)] == [
        ProfilerAction.NONE,
        ProfilerAction.WARMUP,
        ProfilerAction.RECORD,
        ProfilerAction.RECORD,
        ProfilerAction.RECORD_AND_SAVE,
        ProfilerAction.NONE,
        ProfilerAction.NONE,
    ]


def test_stop_before_start_is_refused():
    with pytest.raises(ValueError, match="start=4, stop=3"):
        ProfilerCallback(start=4, stop=3)


def test_a_trace_of_steps_2_to_3_is_written(tmp_path):
    save = tmp_path / "run"
    callback = ProfilerCallback(start=2, stop=3)
    make_run(save, max_duration="5steps", callbacks={"profiler": callback}).fit()

    [trace_path] = glob.glob(os.path.join(save, "profiler", "rank0.*.pt.trace.json"))
    with open(trace_path) as handle:
        trace = json.load(handle)
    names = {event.get("name", "") for event in trace["traceEvents"]}
    # one ProfilerStep span per recorded step (the profiler numbers them from its own start: step 1 is #0)
    assert sorted(name for name in names if name.startswith("ProfilerStep#")) == ["ProfilerStep#1", "ProfilerStep#2"]
    assert "aten::mm" in names or "aten::addmm" in names  # the model's matmuls are in it
    assert callback.profiler is None  # closed right after step 3


def test_a_run_resumed_past_the_window_does_not_profile(tmp_path):
    save = tmp_path / "run"
    make_run(save, max_duration="4steps", save_interval=4).fit()
    callback = ProfilerCallback(start=2, stop=3)
    make_run(save, max_duration="6steps", save_interval=4, callbacks={"profiler": callback}).fit()
    assert not os.path.exists(save / "profiler")


def test_training_that_stops_inside_the_window_keeps_the_recorded_steps(tmp_path):
    save = tmp_path / "run"
    make_run(save, max_duration="3steps", callbacks={"profiler": ProfilerCallback(start=2, stop=10)}).fit()
    [trace_path] = glob.glob(os.path.join(save, "profiler", "rank0.*.pt.trace.json"))
    with open(trace_path) as handle:
        names = {event.get("name", "") for event in json.load(handle)["traceEvents"]}
    assert sorted(name for name in names if name.startswith("ProfilerStep#")) == ["ProfilerStep#1", "ProfilerStep#2"]
