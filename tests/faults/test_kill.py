"""``kill -9`` at a random moment, inside a synchronous checkpoint write and inside an asynchronous one: each
run resumes to weights bit-identical to an uninterrupted run's: nothing lost. ``benchmarks/fault_kill.py``
runs 20 such moments."""

import random
import time

import pytest
import torch

from tests.faults.kill_moments import STEPS, Moment, check_moment, train

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    weights = train(tmp_path_factory.mktemp("reference"), async_save=False)  # also warms up the imports
    again = train(tmp_path_factory.mktemp("again"), async_save=True)
    assert torch.equal(again, weights)  # async saves change nothing: one reference serves both kinds
    # the random-time kill hits a run with sync saves, so time one (async runs are slower: a sync run could
    # finish before a kill placed by their time)
    started = time.monotonic()
    train(tmp_path_factory.mktemp("timed"), async_save=False)
    return weights, time.monotonic() - started


def moments(run_seconds):
    return [
        Moment(async_save=False, seconds=random.uniform(0.2, 0.7) * run_seconds),
        Moment(async_save=False, step=6, part="model_and_optim", offset=random.randrange(0, 40_000)),
        Moment(async_save=True, step=9, part="model_and_optim", offset=random.randrange(0, 40_000)),
    ]


@pytest.mark.parametrize("index", range(3), ids=["random-time", "inside-sync-write", "inside-async-write"])
def test_kill_9_resumes_bit_identically(tmp_path, reference, index):
    weights, run_seconds = reference
    moment = moments(run_seconds)[index]
    assert check_moment(tmp_path / "run", moment, weights) is None
    assert STEPS == 12
