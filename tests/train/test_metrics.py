import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from honing.train.metrics import MetricMergeStrategy, MetricsBuffer, ReduceType, merge_values

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "strategy, expected",
    [
        ("latest", 6.0),
        ("oldest", 2.0),
        ("mean", 4.5),  # OLMo-core: the average with the last value, ((2 + 4) / 2 + 6) / 2
        ("sum", 12.0),
        ("max", 6.0),
        ("min", 2.0),
        ("warn", 2.0),
    ],
)
def test_merge_strategies(strategy, expected):
    buffer = MetricsBuffer()
    for value in (2.0, 4.0, 6.0):
        buffer.record(3, "m", value, merge_strategy=strategy)
    assert buffer.collect()[3]["m"] == pytest.approx(expected)


def test_warn_keeps_the_first_value_and_warns_as_olmo_core(caplog):
    buffer = MetricsBuffer()
    with caplog.at_level(logging.WARNING):
        buffer.record(1, "m", torch.tensor(1.0), ReduceType.mean)
        buffer.record(1, "m", torch.tensor(5.0), ReduceType.mean)
    assert buffer.collect() == {1: {"m": 1.0}}
    assert any("keeping the first value" in r.message for r in caplog.records)


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


def test_merge_values_mean_averages_with_the_last_value_as_olmo_core_documents():
    # OLMo-core's MetricMergeStrategy.mean: "when a duplicate is logged we take the average with the last value"
    old = torch.tensor(3.0)  # already the merge of 2 values: the count does not weigh it
    assert merge_values(old, torch.tensor(6.0), MetricMergeStrategy.mean, count=2).item() == pytest.approx(4.5)
    buffer = MetricsBuffer()
    for value in (1.0, 2.0, 4.0):
        buffer.record(1, "m", value, merge_strategy=MetricMergeStrategy.mean)
    assert buffer.collect() == {1: {"m": 2.75}}  # ((1 + 2) / 2 + 4) / 2


def test_reduce_type_none_is_not_reduced_and_one_metric_keeps_one_type():
    buffer = MetricsBuffer()
    buffer.record(1, "local", 3.0)  # None: no reduction
    assert buffer.reduce_types["local"] is None
    with pytest.raises(RuntimeError, match="one metric needs one reduce type"):
        buffer.record(2, "local", 4.0, ReduceType.mean)


REDUCE_WORKER = """
import json, sys
import torch.distributed as dist
from honing.train.metrics import ReduceType, reduce_steps

dist.init_process_group("gloo")
rank = dist.get_rank()
steps = {1: {"none": 10.0 + rank, "mean": 1.0 + rank}}
if rank == 1:
    steps[1]["only_rank1"] = 7.0  # a metric with no reduction need not exist on every rank
reduced = reduce_steps(steps, {"none": None, "mean": ReduceType.mean, "only_rank1": None})
dist.destroy_process_group()
with open(sys.argv[1] + f".{rank}", "w") as handle:
    json.dump(reduced, handle)
"""


@pytest.mark.slow
def test_reduce_type_none_keeps_each_ranks_own_value(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(REDUCE_WORKER)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            str(script),
            str(tmp_path / "out"),
        ],
        check=True,
        timeout=120,
        env=env,
        capture_output=True,
    )
    rank0, rank1 = (json.loads((tmp_path / f"out.{rank}").read_text()) for rank in (0, 1))
    assert rank0 == {"1": {"none": 10.0, "mean": 1.5}}  # rank 0 logs its own value, as OLMo-core does
    assert rank1 == {"1": {"none": 11.0, "mean": 1.5, "only_rank1": 7.0}}
