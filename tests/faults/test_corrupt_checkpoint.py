"""A corrupt newest checkpoint (a truncated file, flipped bytes in the DCP metadata, a rank's missing file)
is skipped with a warning naming what is wrong; the run resumes from the previous complete checkpoint to the
same weights as a run that never stopped: nothing lost."""

import logging
import shutil

import pytest
import torch

from tests.helpers import flat_weights, make_trainer


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The weights of an uninterrupted 12-step run, and a run stopped after step 8 (checkpoints 4 and 8)."""
    reference = make_trainer(tmp_path_factory.mktemp("reference"), max_duration="12steps")
    reference.fit()
    stopped = tmp_path_factory.mktemp("stopped")
    make_trainer(stopped, max_duration="12steps", hard_stop="8steps").fit()
    return flat_weights(reference), stopped


def truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def flip_bytes(path):
    data = bytearray(path.read_bytes())
    for index in range(len(data) // 3, len(data) // 3 + 64, 8):
        data[index] ^= 0xFF
    path.write_bytes(bytes(data))


DAMAGE = {
    "truncated-dcp-data": (lambda step: truncate(step / "model_and_optim" / "__0_0.distcp"), "corrupted"),
    "truncated-trainer-state": (lambda step: truncate(step / "train" / "rank0.pt"), "truncated or corrupt"),
    "flipped-metadata-bytes": (lambda step: flip_bytes(step / "model_and_optim" / ".metadata"), "metadata read failed"),
    "truncated-metadata": (lambda step: truncate(step / "model_and_optim" / ".metadata"), "metadata read failed"),
    "missing-rank-data-file": (lambda step: (step / "model_and_optim" / "__0_0.distcp").unlink(), "__0_0.distcp"),
    "missing-rank-trainer-state": (lambda step: (step / "train" / "rank0.pt").unlink(), "trainer state is missing"),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_corrupt_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, runs, damage, caplog):
    reference, stopped = runs
    run = tmp_path / "run"
    shutil.copytree(stopped, run)
    damage_fn, what = DAMAGE[damage]
    damage_fn(run / "step8")
    resumed = make_trainer(run, max_duration="12steps", init_seed=7)  # the load replaces the init
    with caplog.at_level(logging.WARNING):
        resumed.fit()
    # what a user sees: honing's warnings and the root logger's (DCP's own logger does not propagate)
    shown = [r for r in caplog.records if r.levelno >= logging.WARNING and not r.name.startswith("c10d-")]
    warnings = [r.getMessage() for r in shown]
    skipped = [m for m in warnings if m.startswith(f"skipping checkpoint {run / 'step8'}:")]
    assert len(skipped) == 1, warnings
    assert what in skipped[0] and "trying the previous one" in skipped[0]
    assert not any("Traceback" in m or "metadata is not found" in m for m in warnings)
    assert any(m.startswith(f"moved the unloadable checkpoint {run / 'step8'} aside") for m in warnings)
    assert (run / "step8.corrupt").is_dir()  # kept for a look, out of the way of the new step 8
    assert resumed.global_step == 12
    assert torch.equal(flat_weights(resumed), reference)
