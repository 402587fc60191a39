import json
import logging
import math

import pytest
import torch

from honing.train.callbacks.loss_spike import NONFINITE_COUNT, SPIKE_SCORE, LossSpikeCallback
from tests.helpers import make_trainer


class FakeTrainer:
    """Feeds one loss per step and keeps what the callback records."""

    def __init__(self):
        self.global_step = 0
        self.loss = None
        self.recorded = {}

    def get_metric(self, name):
        return None if self.loss is None else torch.tensor(self.loss)

    def record_metric(self, name, value, reduce_type=None):
        self.recorded.setdefault(self.global_step, {})[name] = float(value)


def feed(callback, trainer, losses):
    for loss in losses:
        trainer.global_step += 1
        trainer.loss = loss
        callback.on_step_end()
    return [trainer.recorded[step] for step in sorted(trainer.recorded)][-len(losses) :]


def expected_scores(losses, window, warmup):
    """The z-scores by hand: exponential mean and variance of the finite losses before each step."""
    alpha, mean, var, scores = 2 / (window + 1), None, 0.0, []
    for seen, loss in enumerate(losses):
        if not math.isfinite(loss):
            scores.append(0.0)
            continue
        if mean is None:
            mean = loss
        std = max(math.sqrt(var), 1e-3 * abs(mean) + 1e-6)
        scores.append(0.0 if seen < warmup else (loss - mean) / std)
        delta = loss - mean
        mean += alpha * delta
        var = (1 - alpha) * (var + alpha * delta * delta)
    return scores


def test_the_spike_score_is_a_z_score_against_moving_statistics_and_nonfinite_losses_are_counted():
    losses = [4.0, 3.9, 3.7, 3.8, 3.6, 3.5, 9.0, 3.4, float("nan"), 3.3, float("inf"), 3.2]
    callback, trainer = LossSpikeCallback(window=5, warmup_steps=3), FakeTrainer()
    callback.attach(trainer)
    rows = feed(callback, trainer, losses)
    assert [r[SPIKE_SCORE] for r in rows] == pytest.approx(expected_scores(losses, 5, 3), rel=1e-5)
    assert rows[6][SPIKE_SCORE] > 6  # the spike stands out
    assert [r[NONFINITE_COUNT] for r in rows] == [0] * 8 + [1, 1, 2, 2]


def test_the_statistics_resume_exactly_from_a_checkpointed_state():
    losses = [4.0, 3.9, 3.7, 3.8, 3.6, 3.5, 9.0, 3.4, float("nan"), 3.3]
    whole, trainer = LossSpikeCallback(window=4, warmup_steps=2), FakeTrainer()
    whole.attach(trainer)
    expected = feed(whole, trainer, losses)
    first, trainer = LossSpikeCallback(window=4, warmup_steps=2), FakeTrainer()
    first.attach(trainer)
    feed(first, trainer, losses[:5])
    state = json.loads(json.dumps(first.state_dict()))  # only plain numbers are checkpointed
    second = LossSpikeCallback(window=4, warmup_steps=2)
    second.attach(trainer)
    second.load_state_dict(state)
    assert feed(second, trainer, losses[5:]) == expected[5:]


def test_a_spike_is_warned_about_once(caplog):
    callback = LossSpikeCallback(warn_score=5.0)
    with caplog.at_level(logging.WARNING):
        for step, score in enumerate([0.5, 7.0, 8.0, 1.0, 9.0], start=1):
            callback.on_log(step, {SPIKE_SCORE: score, "train/loss": 3.0})
    spikes = [r.getMessage() for r in caplog.records if "loss spike" in r.getMessage()]
    assert len(spikes) == 2 and spikes[0].startswith("loss spike at step 2:") and "step 5" in spikes[1]


def test_every_logged_step_has_both_metrics(tmp_path):
    trainer = make_trainer(tmp_path, max_duration="6steps", callbacks={"loss_spike": LossSpikeCallback(warmup_steps=2)})
    trainer.fit()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r[NONFINITE_COUNT] for r in rows] == [0.0] * 6
    assert [r[SPIKE_SCORE] for r in rows][:2] == [0.0, 0.0] and rows[2][SPIKE_SCORE] != 0.0
