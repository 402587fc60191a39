"""prepare_training_environment under a real torchrun with 2 gloo processes, and metric reduction."""

import json
import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from honing.distributed import get_rank, get_world_size, is_distributed, prepare_training_environment, seed_all

WORKER = textwrap.dedent("""
    import json, sys, torch
    from honing.distributed import (get_rank, get_world_size, is_distributed, prepare_training_environment,
                                    teardown_training_environment)
    from honing.train.metrics import MetricsBuffer, ReduceType

    prepare_training_environment(seed=7)
    rank = get_rank()
    buffer = MetricsBuffer()
    buffer.record(1, "loss", torch.tensor(1.0 + rank), ReduceType.mean)     # 1, 2 → 1.5
    buffer.record(1, "tokens", torch.tensor(10 * (rank + 1)), ReduceType.sum)  # 10, 20 → 30
    buffer.record(1, "peak", torch.tensor(5.0 - rank), ReduceType.max)       # 5, 4 → 5
    buffer.record(1, "norm", torch.tensor(3.0 if rank == 0 else 4.0), ReduceType.l2_norm)  # → 5
    result = {"rank": rank, "world": get_world_size(), "distributed": is_distributed(),
              "metrics": buffer.collect()[1], "random": torch.rand(1).item()}
    teardown_training_environment()
    with open(sys.argv[1] + f".{rank}", "w") as handle:
        json.dump(result, handle)
""")


@pytest.mark.slow
def test_torchrun_two_processes_join_group_and_reduce_metrics(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    out = tmp_path / "result"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script), str(out)],
        check=True,
        timeout=120,
        env=env,
        capture_output=True,
    )
    results = [json.loads((tmp_path / f"result.{rank}").read_text()) for rank in (0, 1)]
    for rank, result in enumerate(results):
        assert result["rank"] == rank and result["world"] == 2 and result["distributed"]
        assert result["metrics"] == pytest.approx({"loss": 1.5, "tokens": 30.0, "peak": 5.0, "norm": 5.0})
    assert results[0]["random"] == results[1]["random"]  # the same seed on every rank


def test_single_process_is_not_distributed():
    prepare_training_environment(seed=3)
    assert not is_distributed() and get_rank() == 0 and get_world_size() == 1


def test_seed_all_seeds_every_generator():
    seed_all(11)
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    seed_all(11)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == first


def test_a_finished_run_waits_for_its_peers_before_leaving_and_a_failed_one_does_not(monkeypatch):
    # gloo closes a group's connections at once, so a rank leaving early can break a peer still in the last
    # collective; a failed rank must not wait on peers that may be gone.
    import honing.distributed as distributed

    calls: list[str] = []
    monkeypatch.setattr(distributed, "is_distributed", lambda: True)
    monkeypatch.setattr(distributed.dist, "barrier", lambda: calls.append("barrier"))
    monkeypatch.setattr(distributed.dist, "destroy_process_group", lambda: calls.append("destroy"))
    distributed.teardown_training_environment(wait_for_peers=True)
    assert calls == ["barrier", "destroy"]
    calls.clear()
    distributed.teardown_training_environment()
    assert calls == ["destroy"]


def test_a_torchrun_worker_that_finished_leaves_without_interpreter_finalization(monkeypatch):
    # gloo's worker threads outlive destroy_process_group; one freeing a tensor while the interpreter finalizes
    # aborts the process, so a worker leaves through os._exit with its code, data-loader workers stopped first.
    import multiprocessing

    from honing import cli

    class Child:
        daemon, stopped = True, False

        def terminate(self):
            self.stopped = True

    child, exits = Child(), []
    monkeypatch.setattr(cli, "setup_logging", lambda: None)  # this process's logging and faulthandler stay
    monkeypatch.setattr(cli.faulthandler, "enable", lambda **kwargs: None)
    monkeypatch.setattr(cli.logging, "shutdown", lambda: None)
    monkeypatch.setattr(cli, "distributed_rank", lambda: 1)
    monkeypatch.setattr(cli, "run", lambda args: 0)
    monkeypatch.setattr(multiprocessing, "active_children", lambda: [child])
    monkeypatch.setattr(cli.os, "_exit", exits.append)
    cli.main(["train", "config.yaml"])
    assert exits == [0] and child.stopped
    monkeypatch.setattr(cli, "distributed_rank", lambda: None)  # one process: an ordinary return
    assert cli.main(["train", "config.yaml"]) == 0 and exits == [0]
