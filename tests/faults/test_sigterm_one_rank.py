"""SIGTERM to one rank of ``honing train --nproc 2`` (gloo): every rank stops at the same step and saves, the
job exits 0, and the next run resumes to weights bit-identical to a run that never stopped: nothing lost."""

import pytest

from tests.distributed.runs import assert_same_weights, honing_train, weights, write_config

pytestmark = pytest.mark.slow

STEPS, TERM_STEP = 8, 3
# the ranks learn of the request through an asynchronous exchange read one step later (no blocking collective
# per step): every rank runs exactly one more step, then all stop together
STOP_STEP = TERM_STEP + 1


def callbacks(folder, term_step):
    dump = {
        "import_path": "tests.distributed.callbacks:DumpWeights",
        "kwargs": {"folder": str(folder), "steps": [STEPS]},
    }
    term = {"import_path": "tests.faults.signals:TermOnRank", "kwargs": {"rank": 1, "step": term_step}}
    return [dump, term]


def test_sigterm_to_one_rank_saves_on_every_rank_exits_0_and_resumes_exactly(tmp_path):
    config, _ = write_config(
        tmp_path, "ref", steps=STEPS, save_interval=100, custom=callbacks(tmp_path / "ref-weights", 0)
    )
    result = honing_train(config, nproc=2, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]

    config, save_folder = write_config(
        tmp_path, "cut", steps=STEPS, save_interval=100, custom=callbacks(tmp_path / "cut-weights", TERM_STEP)
    )
    result = honing_train(config, nproc=2, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "received SIGTERM" in result.stderr + result.stdout
    # both ranks stopped after the same step and the checkpoint holds both ranks' state
    assert [p.name for p in sorted(save_folder.glob("step*"))] == [f"step{STOP_STEP}"]
    checkpoint = save_folder / f"step{STOP_STEP}"
    assert (checkpoint / ".complete").exists()
    assert sorted(p.name for p in (checkpoint / "train").iterdir()) == ["rank0.pt", "rank1.pt"]
    assert not (tmp_path / "cut-weights" / f"step{STEPS}.pt").exists()

    result = honing_train(config, nproc=2, timeout=240)  # the same command again resumes
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"loaded checkpoint {checkpoint}" in result.stderr
    assert_same_weights(
        weights(tmp_path / "ref-weights" / f"step{STEPS}.pt"),
        weights(tmp_path / "cut-weights" / f"step{STEPS}.pt"),
    )
