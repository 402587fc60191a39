"""Text samples through the real Trainer: every N steps and at the end, in samples.jsonl and to trackers."""

from __future__ import annotations

import json

import pytest
import torch

from honing.train import Callback
from honing.train.callbacks.sample import TextSampleCallback
from tests.helpers import make_trainer as make_run


class SampleRecorder(Callback):
    """Keeps what ``on_log_samples`` receives, as a tracker would."""

    def __init__(self):
        self.logged = []

    def on_log_samples(self, step, name, rows):
        self.logged.append((step, name, rows))


def generate(prompt):
    # a random draw: sampling must not move the training RNG stream
    return f" #{torch.rand(()).item():.3f}"


def samples(save_folder):
    with open(save_folder / "samples.jsonl") as handle:
        return [json.loads(line) for line in handle]


def test_samples_every_interval_and_at_the_end_once(tmp_path):
    recorder = SampleRecorder()
    printed = []
    sample = TextSampleCallback(generate, prompts=["a", "b"], interval=2, printer=printed.append)
    make_run(tmp_path / "odd", max_duration="5steps", callbacks={"sample": sample, "recorder": recorder}).fit()
    assert [(s["step"], s["prompt"]) for s in samples(tmp_path / "odd")] == [
        (2, "a"),
        (2, "b"),
        (4, "a"),
        (4, "b"),
        (5, "a"),
        (5, "b"),
    ]
    assert [(step, name, [r["prompt"] for r in rows]) for step, name, rows in recorder.logged] == [
        (2, "samples", ["a", "b"]),
        (4, "samples", ["a", "b"]),
        (5, "samples", ["a", "b"]),
    ]
    assert recorder.logged[-1][2][0]["text"].startswith(" #") and len(printed) == 6

    # a last step on the interval samples once, not twice
    sample = TextSampleCallback(generate, prompts=["a"], interval=2)
    make_run(tmp_path / "even", max_duration="4steps", callbacks={"sample": sample}).fit()
    assert [s["step"] for s in samples(tmp_path / "even")] == [2, 4]


def test_sampling_does_not_change_training(tmp_path):
    from tests.helpers import flat_weights

    plain = make_run(tmp_path / "plain", max_duration="4steps")
    plain.fit()
    sampled = make_run(
        tmp_path / "sampled",
        max_duration="4steps",
        callbacks={"sample": TextSampleCallback(generate, prompts=["a"], interval=1)},
    )
    sampled.fit()
    assert torch.equal(flat_weights(plain), flat_weights(sampled))


def test_interval_below_one_is_refused_and_the_prompts_are_given_by_name():
    with pytest.raises(ValueError, match="interval must be at least 1, got 0"):
        TextSampleCallback(str.upper, prompts=["a"], interval=0)
    with pytest.raises(TypeError):
        TextSampleCallback(str.upper, ["a"])  # type: ignore[misc]
    sample = TextSampleCallback(str.upper, prompts=["a"])
    assert sample.interval is None and sample.printer is print and sample.samples == []
