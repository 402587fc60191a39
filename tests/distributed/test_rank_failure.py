"""One failing rank of ``honing train --nproc 2`` ends the whole job quickly, non-zero, naming the rank."""

import time

import pytest

from tests.distributed.runs import honing_train, write_config

pytestmark = pytest.mark.slow


def test_a_rank_that_raises_fails_the_job_and_is_named(tmp_path):
    fail = {"import_path": "tests.distributed.callbacks:FailOnRank", "kwargs": {"rank": 1, "step": 3}}
    config, save_folder = write_config(tmp_path, "run", steps=50, save_interval=2, custom=[fail])
    start = time.monotonic()
    result = honing_train(config, nproc=2, timeout=90)
    elapsed = time.monotonic() - start
    assert result.returncode != 0
    assert elapsed < 60, elapsed
    assert "honing: rank 1 failed: RuntimeError: injected failure at step 3" in result.stderr
    assert "the 2-process run failed" in result.stderr
    # the checkpoint of step 2 was complete before the failure; nothing later was trained
    assert (save_folder / "step2" / ".complete").exists()
    assert not (save_folder / "step4").exists()


def test_a_killed_rank_fails_the_job(tmp_path):
    kill = {"import_path": "tests.distributed.callbacks:FailOnRank", "kwargs": {"rank": 1, "step": 3, "how": "kill"}}
    config, save_folder = write_config(tmp_path, "run", steps=50, custom=[kill])
    start = time.monotonic()
    result = honing_train(config, nproc=2, timeout=90)
    elapsed = time.monotonic() - start
    assert result.returncode != 0
    assert elapsed < 60, elapsed
    # torchrun's failure summary names the killed rank and the signal
    assert "rank      : 1 (local_rank: 1)" in result.stderr
    assert "Signal 9 (SIGKILL)" in result.stderr
