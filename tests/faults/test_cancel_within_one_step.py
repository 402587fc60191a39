"""SIGTERM to one rank at a random step, ``trainer.cancel_check_interval`` at its default, 2 ranks: every rank
stops after at most one more step (the ranks agree through an asynchronous all-reduce read one step later, never
a blocking collective per step), saves one checkpoint of that step, and the job exits 0."""

import json
import random

import pytest

from tests.distributed.runs import CONFIG, honing_train, metrics

pytestmark = pytest.mark.slow

STEPS = 40


def test_sigterm_at_a_random_step_stops_every_rank_within_one_step_and_exits_0(tmp_path):
    term_step = random.randint(2, 12)
    term_rank = random.randint(0, 1)
    config = CONFIG.replace("  cancel_check_interval: 1\n", "")  # the default interval
    assert "cancel_check_interval" not in config
    save_folder = tmp_path / "run"
    path = tmp_path / "run.yaml"
    term = {"import_path": "tests.faults.signals:TermOnRank", "kwargs": {"rank": term_rank, "step": term_step}}
    custom = json.dumps([term])
    path.write_text(config.format(save_folder=save_folder, steps=STEPS, save_interval=100, custom=custom))

    result = honing_train(str(path), nproc=2, timeout=240)
    where = f"SIGTERM to rank {term_rank} at the end of step {term_step}"
    assert result.returncode == 0, (where, result.stderr[-3000:])
    assert "received SIGTERM" in result.stderr + result.stdout, where
    saved = [p.name for p in save_folder.glob("step*")]
    assert len(saved) == 1, (where, saved)
    stop_step = int(saved[0].removeprefix("step"))
    # the request reaches the other rank with the exchange of the next step: exactly one more step runs
    assert stop_step == term_step + 1, (where, stop_step)
    assert max(metrics(save_folder)) == stop_step, where
    assert sorted(p.name for p in (save_folder / saved[0] / "train").iterdir()) == ["rank0.pt", "rank1.pt"]
