import logging
import math
import os
import subprocess
import sys
import time

import pytest
import torch

from honing import cpu_busy
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


def test_the_load_average_is_read_less_this_process_own_share(monkeypatch):
    monkeypatch.setattr(cpu_load.os, "getloadavg", lambda: (2.5, 1.0, 0.5))
    monkeypatch.setattr(cpu_load.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(cpu_load.time, "process_time", lambda: 30.0)  # 30 s of imports raised the average
    load = cpu_load.load_average_less_own()  # where the kernel gives no busy times
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


def sample(wall, own, busy):
    return cpu_busy.CpuSample(wall=wall, own=own, busy=busy)


def test_other_processes_busy_cores_are_the_window_busy_time_less_this_process_own():
    start = sample(10.0, 2.0, 100.0)
    # 4 s later: the CPUs were busy 7 s in all, 3 s of them this process's own: 4 s of others over 4 s: one core
    assert start.other_busy_cores(sample(14.0, 5.0, 107.0)) == pytest.approx(1.0)
    assert start.other_busy_cores(sample(14.0, 9.0, 107.0)) == 0.0  # own time counted on other ticks: never below 0
    assert start.other_busy_cores(sample(10.2, 2.1, 100.3)) is None  # too short a window to say
    assert start.other_busy_cores(sample(14.0, 5.0, None)) is None  # no /proc/stat


def test_proc_stat_busy_time_counts_this_process_cpus_only():
    text = (
        "cpu  900 10 300 5000 70 5 5 40 0 0\n"
        "cpu0 100 0 50 2000 30 1 1 10 0 0\n"  # busy: user, nice, system, irq, softirq; not idle, iowait, steal
        "cpu1 200 10 100 1000 20 2 2 10 0 0\n"
        "cpu2 600 0 150 2000 20 2 2 20 0 0\n"
        "intr 12345 0 0\n"
    )
    assert cpu_busy.busy_seconds(text, {0, 1}, 100.0) == pytest.approx((152 + 314) / 100)
    assert cpu_busy.busy_seconds(text, {2}, 100.0) == pytest.approx(754 / 100)
    assert cpu_busy.busy_seconds(text, {7}, 100.0) is None


def test_the_watch_measures_since_its_last_reading_then_since_import_then_falls_back(monkeypatch):
    monkeypatch.setattr(cpu_load, "usable_cores", lambda: 2)
    readings = iter([sample(20.0, 4.0, 130.0), sample(20.1, 4.1, 130.2), sample(21.0, 4.5, 131.0)])
    monkeypatch.setattr(cpu_busy.CpuSample, "now", classmethod(lambda cls, cpus=None: next(readings)))
    watch = cpu_load.LoadWatch(sample(10.0, 2.0, 100.0))
    assert watch.read() == CpuLoad(2, pytest.approx((30 - 2) / 10))  # since import: 2.8 cores of others (a burst)
    assert watch.read() == CpuLoad(2, pytest.approx((30.2 - 2.1) / 10.1))  # 0.1 s since the last: since import
    assert watch.read() == CpuLoad(2, pytest.approx((0.8 - 0.4) / 0.9))  # 0.9 s since the last reading
    monkeypatch.setattr(cpu_busy.CpuSample, "now", classmethod(lambda cls, cpus=None: sample(30.0, 5.0, None)))
    monkeypatch.setattr(cpu_load, "load_average_less_own", lambda: CpuLoad(2, 0.25))
    assert watch.read() == CpuLoad(2, 0.25)  # no busy times (not Linux): the load average


@pytest.mark.skipif(not os.path.isfile(cpu_busy.STAT_PATH), reason="no /proc/stat (not Linux)")
def test_a_process_spinning_on_a_core_is_seen_while_this_one_sleeps():
    """A busy child process for the whole window shows as at least half a core (the test suite's other worker may
    share the cores with it); this process sleeping adds nothing."""
    spin = "import time\nend = time.time() + 30\nwhile time.time() < end: pass"
    child = subprocess.Popen([sys.executable, "-c", spin])
    try:
        time.sleep(0.3)  # the child is spinning
        start = cpu_busy.CpuSample.now()
        time.sleep(1.5)
        busy = start.other_busy_cores(cpu_busy.CpuSample.now())
    finally:
        child.kill()
        child.wait()
    assert busy is not None and busy >= 0.5
