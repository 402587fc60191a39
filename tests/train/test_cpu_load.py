import logging
import math

import pytest
import torch

from honing.recipes import base as recipe_base
from honing.train import cpu_load
from honing.train.cpu_load import CpuLoad, choose_num_threads


@pytest.mark.parametrize(
    "cores, other_load, threads",
    [
        (2, 0.1, 2),  # quiet: every core
        (2, 1.0, 1),  # one core busy: the other
        (2, 3.7, 1),  # oversubscribed: never below one thread
        (16, 5.4, 11),  # 5.4 rounds to 5 busy cores
        (16, 5.5, 10),  # half a core and up counts as busy
        (1, 0.0, 1),
    ],
)
def test_threads_are_the_cores_other_processes_leave_free(cores, other_load, threads):
    chosen, why = choose_num_threads(CpuLoad(cores, other_load))
    assert chosen == threads
    assert f"using {threads} CPU thread" in why
    assert f"load {other_load:.1f} from other processes on {cores} core" in why
    assert "set trainer.num_threads=N" in why


def test_the_load_is_read_less_this_process_own_share(monkeypatch):
    monkeypatch.setattr(cpu_load.os, "getloadavg", lambda: (2.5, 1.0, 0.5))
    monkeypatch.setattr(cpu_load.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(cpu_load.time, "process_time", lambda: 30.0)  # 30 s of imports raised the average
    load = cpu_load.current_load()
    assert load.cores == 4
    assert load.other_load == pytest.approx(2.5 - (1 - math.exp(-30 / 60)))
    assert (load.busy_cores, load.free_cores) == (2, 2)


def test_a_probe_is_honest_only_on_cores_left_free():
    assert CpuLoad(2, 0.9).leaves_free(1)
    assert not CpuLoad(2, 0.9).leaves_free(2)
    assert not CpuLoad(2, 3.5).leaves_free(1)  # its one thread shares a core with others


def test_recipe_threads_configured_env_or_free_cores(monkeypatch, caplog):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(recipe_base, "current_load", lambda: CpuLoad(2, 1.2))
    assert recipe_base.num_threads(3) == 3  # trainer.num_threads wins, nothing said
    assert not caplog.records
    with caplog.at_level(logging.INFO, logger="honing.recipes.base"):
        assert recipe_base.num_threads(None) == 1
    assert [record.getMessage() for record in caplog.records] == [
        "trainer.num_threads unset: using 1 CPU thread (load 1.2 from other processes on 2 cores); "
        "set trainer.num_threads=N to choose"
    ]
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the user's or torchrun's choice, which torch read at start
    monkeypatch.setattr(recipe_base, "current_load", lambda: pytest.fail("the load is not read"))
    assert recipe_base.num_threads(None) == torch.get_num_threads()
