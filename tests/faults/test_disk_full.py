"""A full disk during a save (ENOSPC injected through the storage layer's write hook): the save is not marked
complete, the earlier checkpoint stays, training stops with one clear error, and the next run resumes from
the earlier checkpoint to the same weights as a run that never failed: nothing lost."""

import errno

import pytest
import torch

from honing import storage
from honing.errors import CheckpointError
from honing.train import Checkpointer
from tests.helpers import flat_weights, make_trainer


@pytest.fixture(scope="module")
def reference_weights(tmp_path_factory):
    trainer = make_trainer(tmp_path_factory.mktemp("reference"), max_duration="12steps")
    trainer.fit()
    return flat_weights(trainer)


class DiskFull:
    """A write hook: the disk fills up after ``budget`` more bytes go into files whose path contains ``marker``."""

    def __init__(self, marker: str, budget: int):
        self.marker = marker
        self.budget = budget
        self.raised = 0

    def __call__(self, path: str, nbytes: int) -> None:
        if self.marker not in path:
            return
        self.budget -= nbytes
        if self.budget < 0:
            self.raised += 1
            raise OSError(errno.ENOSPC, "No space left on device", path)


@pytest.fixture
def disk_full():
    hooks = []

    def install(marker: str, budget: int) -> DiskFull:
        hook = DiskFull(marker, budget)
        storage.set_write_hook(hook)
        hooks.append(hook)
        return hook

    yield install
    storage.set_write_hook(None)


@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("budget", [0, 2000], ids=["first-write", "mid-dcp-data"])
def test_a_full_disk_during_a_save_loses_nothing(tmp_path, reference_weights, disk_full, async_save, budget):
    hook = disk_full("step8.tmp", budget)
    trainer = make_trainer(tmp_path, max_duration="12steps", async_save=async_save)
    with pytest.raises(CheckpointError) as raised:
        trainer.fit()
    message = str(raised.value)
    assert "\n" not in message
    assert "step8: could not save checkpoint" in message and "No space left on device" in message
    assert "not marked complete" in message
    assert hook.raised >= 1
    # the failed save left nothing behind that looks like a checkpoint; the earlier one is intact
    assert [step for step, _ in Checkpointer.find_checkpoints(str(tmp_path))] == [4]
    assert not (tmp_path / "step8").exists() and not (tmp_path / "step8.tmp").exists()

    storage.set_write_hook(None)  # space freed: the next run resumes from step 4
    resumed = make_trainer(tmp_path, max_duration="12steps", async_save=async_save, init_seed=99)
    resumed.fit()
    assert resumed.global_step == 12
    assert torch.equal(flat_weights(resumed), reference_weights)
