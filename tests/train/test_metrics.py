import logging

import pytest
import torch

from honing.train.metrics import MetricMergeStrategy, MetricsBuffer, ReduceType, merge_values


@pytest.mark.parametrize("strategy, expected", [
    ("latest", 6.0), ("oldest", 2.0), ("mean", 4.0), ("sum", 12.0), ("max", 6.0), ("min", 2.0), ("warn", 6.0),
])
def test_merge_strategies(strategy, expected):
    buffer = MetricsBuffer()
    for value in (2.0, 4.0, 6.0):
        buffer.record(3, "m", value, merge_strategy=strategy)
    assert buffer.collect()[3]["m"] == pytest.approx(expected)


def test_warn_strategy_warns_once(caplog):
    buffer = MetricsBuffer()
    with caplog.at_level(logging.WARNING):
        for step in (1, 2):
            buffer.record(step, "m", 1.0)
            buffer.record(step, "m", 2.0)
    assert sum("recorded twice" in r.message for r in caplog.records) == 1


def test_collect_is_per_step_and_clears():
    buffer = MetricsBuffer()
    buffer.record(1, "train/loss", torch.tensor(2.5), ReduceType.mean)
    buffer.record(2, "train/loss", torch.tensor(2.0), ReduceType.mean)
    buffer.record(2, "tokens", torch.tensor(7), ReduceType.sum)
    assert buffer.get(2, "tokens").item() == 7
    assert buffer.collect() == {1: {"train/loss": 2.5}, 2: {"train/loss": 2.0, "tokens": 7.0}}
    assert buffer.collect() == {}


def test_merge_values_mean_counts_previous_values():
    old = torch.tensor(3.0)  # the mean of 2 values so far
    assert merge_values(old, torch.tensor(6.0), MetricMergeStrategy.mean, count=2).item() == pytest.approx(4.0)
