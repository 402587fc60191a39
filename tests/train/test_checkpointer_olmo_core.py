"""The Checkpointer's names from OLMo-core's document: ``load(..., load_optim_state=...)`` (None: load what the
checkpoint has), ``write_file(dir, fname, contents)``, and the knobs of ``CheckpointerConfig`` it takes:
``save_thread_count``, ``pre_download`` / ``load_thread_count`` (a remote checkpoint fetched to a local copy)."""

from __future__ import annotations

import logging
import os
import shutil
import uuid

import fsspec
import pytest
import torch

from honing.errors import ConfigError
from honing.train.checkpoint import Checkpointer
from honing.train.checkpoint_download import log as download_log
from honing.train.train_module import ModelState
from tests.helpers import tiny_llama

pytestmark = [
    pytest.mark.filterwarnings("ignore:torch.distributed is disabled"),
    pytest.mark.filterwarnings("ignore:fsync not supported"),  # DCP writing to fsspec's memory file system
]


class Module(ModelState):
    """A tiny Llama with AdamW after ``steps`` optimizer steps (0: no optimizer state yet)."""

    def __init__(self, seed: int = 0, steps: int = 1):
        self.model = tiny_llama(seed=seed)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-2)
        for _ in range(steps):
            ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(seed))
            self.model(input_ids=ids, labels=ids).loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)


class WeightsOnly(Module):
    """Saves the model alone, as a weights-only checkpoint holds."""

    def state_dict_to_save(self):
        return {"model": super().state_dict_to_save()["model"]}


def weights(module: ModelState) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in module.model.parameters()])


@pytest.fixture
def memory_folder():
    """A remote folder (fsspec's in-memory file system), removed afterwards."""
    name = f"honing-test-{uuid.uuid4().hex[:8]}"
    yield f"memory://{name}"
    fsspec.filesystem("memory").rm(f"/{name}", recursive=True)


def test_load_takes_olmo_cores_load_optim_state(tmp_path):
    saved = Module(seed=0)
    Checkpointer().save(str(tmp_path / "step1"), saved, {"global_step": 1})
    without = Module(seed=1, steps=0)
    Checkpointer().load(str(tmp_path / "step1"), without, load_optim_state=False)
    assert torch.equal(weights(without), weights(saved)) and not without.optimizer.state
    with_optim = Module(seed=1, steps=0)
    state = Checkpointer().load(str(tmp_path / "step1"), with_optim, load_optim_state=True)
    assert state == {"global_step": 1} and len(with_optim.optimizer.state) == len(saved.optimizer.state)


def test_none_loads_whatever_the_checkpoint_holds(tmp_path):
    Checkpointer().save(str(tmp_path / "full"), Module(seed=0), {"global_step": 3})
    Checkpointer().save(str(tmp_path / "weights"), WeightsOnly(seed=0), {"global_step": 3})
    shutil.rmtree(tmp_path / "weights" / "train")  # and no trainer state either

    full = Module(seed=1, steps=0)
    assert Checkpointer().load(str(tmp_path / "full"), full, load_optim_state=None, load_trainer_state=None) == {
        "global_step": 3
    }
    assert full.optimizer.state  # it had optimizer state: loaded
    bare = Module(seed=1, steps=0)
    assert Checkpointer().load(str(tmp_path / "weights"), bare, load_optim_state=None, load_trainer_state=None) is None
    assert torch.equal(weights(bare), weights(Module(seed=0))) and not bare.optimizer.state


def test_write_file_to_a_local_or_remote_folder(tmp_path, memory_folder):
    checkpointer = Checkpointer()
    assert checkpointer.write_file(str(tmp_path / "a"), "notes/readme.txt", "hello") == str(
        tmp_path / "a" / "notes" / "readme.txt"
    )
    assert (tmp_path / "a" / "notes" / "readme.txt").read_text() == "hello"
    target = checkpointer.write_file(memory_folder, "data.bin", b"\x01\x02")  # no uploader: written directly
    assert target == f"{memory_folder}/data.bin"
    with fsspec.open(target, "rb") as handle:
        assert handle.read() == b"\x01\x02"


def test_save_thread_count_writes_each_ranks_files_with_that_many_threads(tmp_path):
    saved = Module(seed=0)
    Checkpointer(save_thread_count=2).save(str(tmp_path / "step1"), saved, {"global_step": 1})
    files = sorted(name for name in os.listdir(tmp_path / "step1" / "model_and_optim") if name.endswith(".distcp"))
    assert files == ["__0_0.distcp", "__0_1.distcp"]
    loaded = Module(seed=1, steps=0)
    Checkpointer().load(str(tmp_path / "step1"), loaded)
    assert torch.equal(weights(loaded), weights(saved))
    with pytest.raises(ConfigError, match="save_thread_count: expected at least 1"):
        Checkpointer(save_thread_count=0)


@pytest.mark.parametrize("settings", [{"pre_download": True}, {"load_thread_count": 3}])
def test_a_remote_checkpoint_is_fetched_to_a_local_copy_first(tmp_path, memory_folder, caplog, settings):
    saved = Module(seed=0)
    Checkpointer().save(f"{memory_folder}/step1", saved, {"global_step": 1})
    loaded = Module(seed=1, steps=0)
    checkpointer = Checkpointer(work_dir=str(tmp_path / "work"), **settings)
    with caplog.at_level(logging.INFO, logger=download_log.name):
        assert checkpointer.load(f"{memory_folder}/step1", loaded) == {"global_step": 1}
    assert torch.equal(weights(loaded), weights(saved))
    assert "before loading it" in caplog.text and os.listdir(tmp_path / "work") == []  # the copy is removed


def test_find_checkpoints_filters_ephemeral_ones(tmp_path):
    module, checkpointer = Module(seed=0), Checkpointer()
    checkpointer.save(str(tmp_path / "step2"), module, {"global_step": 2})
    checkpointer.save(str(tmp_path / "step3"), module, {"global_step": 3}, ephemeral=True)
    everything = [(2, str(tmp_path / "step2")), (3, str(tmp_path / "step3"))]
    assert Checkpointer.find_checkpoints(str(tmp_path)) == everything
    assert Checkpointer.find_checkpoints(str(tmp_path), ephemeral=True) == everything[1:]
    assert Checkpointer.find_checkpoints(str(tmp_path), ephemeral=False) == everything[:1]


def test_contains_checkpoint_is_true_for_a_checkpoint_itself_and_save_takes_ephemeral_by_position(tmp_path):
    module, checkpointer = Module(seed=0), Checkpointer()
    checkpointer.save(str(tmp_path / "step2"), module, {"global_step": 2}, True)  # the document's (dir, ..., ephemeral)
    checkpointer.save_async(str(tmp_path / "step3"), module, {"global_step": 3}, False).result()
    assert Checkpointer.find_checkpoints(str(tmp_path), ephemeral=True) == [(2, str(tmp_path / "step2"))]
    # OLMo-core's "is a checkpoint directory or contains a child checkpoint directory"
    assert Checkpointer.contains_checkpoint(str(tmp_path / "step2")) and Checkpointer.contains_checkpoint(str(tmp_path))
    (tmp_path / "empty").mkdir()
    assert not Checkpointer.contains_checkpoint(str(tmp_path / "empty"))
