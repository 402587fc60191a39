"""The prepare worker pool: every task runs once (in workers, or here for one), progress counts what every worker
reported, a worker's error reaches the caller as raised, a dead worker is a DataError, and no worker outlives the
call."""

from __future__ import annotations

import multiprocessing
import os
import signal

import pytest

from honing.data import worker_pool
from honing.data.progress import WorkProgress
from honing.data.worker_pool import run_tasks
from honing.errors import DataError

HINT = "the pieces it finished are kept"
_setups: list[str] = []


def write_pid(task, report):
    """Record in ``folder`` which process ran task ``number``, reporting its ``number + 1`` units in two parts."""
    folder, number = task
    with open(os.path.join(folder, f"{number}.pid"), "w") as handle:
        handle.write(f"{os.getpid()} {os.environ.get('TOKENIZERS_PARALLELISM')}")
    report(number)
    report(1)


def fail_on_three(task, report):
    folder, number = task
    if number == 3:
        raise DataError(f"{folder}/rows.jsonl:{number}: not a row")
    write_pid(task, report)


def die_on_three(task, report):
    if task[1] == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    write_pid(task, report)


def ran(folder):
    """Which process ran each task, and the TOKENIZERS_PARALLELISM it saw."""
    found = {}
    for name in os.listdir(folder):
        pid, parallelism = (folder / name).read_text().split()
        found[int(name.split(".")[0])] = (int(pid), parallelism)
    return found


def bar(total=0):
    return WorkProgress(total, False, label="test", unit="rows")


def test_two_workers_run_every_task_in_other_processes_and_count_all_progress(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    tasks = [(str(tmp_path), number) for number in range(8)]
    progress = bar(sum(number + 1 for number in range(8)))
    run_tasks(write_pid, tasks, workers=2, progress=progress, resume_hint=HINT)
    pids = {number: pid for number, (pid, _) in ran(tmp_path).items()}
    assert sorted(pids) == list(range(8))
    assert os.getpid() not in pids.values() and len(set(pids.values())) <= 2
    assert {parallelism for _, parallelism in ran(tmp_path).values()} == {"false"}  # one thread per worker
    assert os.environ["TOKENIZERS_PARALLELISM"] == "true"  # restored here
    assert progress.done == progress.total  # every report arrived before the bar closed
    assert multiprocessing.active_children() == []


def test_one_worker_runs_here_with_setup_but_not_worker_setup(tmp_path):
    _setups.clear()
    progress = bar(2)
    run_tasks(
        write_pid,
        [(str(tmp_path), 1)],
        workers=4,
        progress=progress,
        resume_hint=HINT,
        setup=lambda: _setups.append("setup"),
        worker_setup=lambda: _setups.append("worker_setup"),
    )
    assert [pid for pid, _ in ran(tmp_path).values()] == [os.getpid()]
    assert _setups == ["setup"] and progress.done == 2


def test_without_fork_tasks_that_need_it_run_here(tmp_path, monkeypatch):
    monkeypatch.setattr(worker_pool.multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    run_tasks(
        write_pid, [(str(tmp_path), n) for n in range(3)], workers=2, progress=bar(), resume_hint=HINT, needs_fork=True
    )
    assert {pid for pid, _ in ran(tmp_path).values()} == {os.getpid()}


def test_no_tasks_do_nothing(tmp_path):
    run_tasks(write_pid, [], workers=2, progress=bar(), resume_hint=HINT, setup=lambda: pytest.fail("set up"))


@pytest.mark.parametrize("workers", [1, 2])
def test_a_task_error_is_raised_as_the_worker_raised_it(tmp_path, workers):
    tasks = [(str(tmp_path), number) for number in range(6)]
    with pytest.raises(DataError, match=r"rows\.jsonl:3: not a row"):
        run_tasks(fail_on_three, tasks, workers=workers, progress=bar(), resume_hint=HINT)
    assert multiprocessing.active_children() == []
    if workers == 1:
        assert sorted(ran(tmp_path)) == [0, 1, 2]  # here, the first error stops the run


def test_a_dead_worker_is_a_data_error_with_the_resume_hint(tmp_path):
    tasks = [(str(tmp_path), number) for number in range(6)]
    with pytest.raises(DataError, match=rf"a prepare worker died \(killed, or out of memory\); {HINT}$"):
        run_tasks(die_on_three, tasks, workers=2, progress=bar(), resume_hint=HINT)
    assert multiprocessing.active_children() == []
