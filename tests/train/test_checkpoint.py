"""Checkpointer: bit-exact round trips, async staging, the completeness marker, corrupt files, 2 ranks."""

from __future__ import annotations

import copy
import glob
import json
import os
import re
import subprocess
import sys
import textwrap
import threading

import pytest
import torch

import honing.storage
from honing.config.schema import StorageSection
from honing.errors import CheckpointError
from honing.train import checkpoint as checkpoint_module
from honing.train.checkpoint import Checkpointer
from honing.train.remote import Uploader, work_folder_for
from honing.train.train_module import ModelState
from tests.helpers import tiny_llama

# The single-process mode DCP warns about is the one these tests mean to use.
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class TinyModule(ModelState):
    """A tied-embedding Llama with AdamW; ``steps`` optimizer steps give it optimizer state."""

    def __init__(self, seed: int = 0, steps: int = 1):
        self.model = tiny_llama(seed=seed, tie_word_embeddings=True)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-2)
        generator = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            ids = torch.randint(0, 64, (2, 8), generator=generator)
            self.model(input_ids=ids, labels=ids).loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)


def snapshot(module: TinyModule) -> dict:
    """A deep copy of everything a checkpoint must restore."""
    return copy.deepcopy({"model": module.model.state_dict(), "optim": module.optimizer.state_dict()})


def assert_identical(actual, expected, where="state"):
    """Recursive equality; tensors must match in dtype, shape and every bit."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), where
        assert actual.dtype == expected.dtype and torch.equal(actual, expected), where
    elif isinstance(expected, dict):
        assert set(actual) == set(expected), where
        for key in expected:
            assert_identical(actual[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, (list, tuple)):
        assert type(actual) is type(expected) and len(actual) == len(expected), where
        for index, (a, e) in enumerate(zip(actual, expected)):
            assert_identical(a, e, f"{where}[{index}]")
    else:
        assert actual == expected, where


def trainer_state() -> dict:
    return {
        "global_step": 7,
        "global_train_tokens_seen": 1234,
        "epoch": 1,
        "rng": {"torch": torch.get_rng_state(), "python": (3, tuple(range(5)), None)},
        "data_loader": {"order": torch.arange(10), "position": 4},
        "callbacks": {"checkpointer": {"ephemeral": [], "permanent": [3, 6]}},
    }


@pytest.fixture
def module():
    return TinyModule(seed=0)


def test_save_then_load_restores_model_optimizer_and_trainer_state_bit_exactly(tmp_path, module):
    saved, state = snapshot(module), trainer_state()
    target = str(tmp_path / "step7")
    extra_files = {"config.yaml": "lr: 0.01\n", "model/config.json": b"{}"}
    Checkpointer().save(target, module, state, extra_files=extra_files)

    assert sorted(os.listdir(tmp_path)) == ["step7"]  # the temporary folder was renamed
    for name in (".complete", "model_and_optim/.metadata", "train/rank0.pt"):
        assert os.path.isfile(tmp_path / "step7" / name), name
    assert (tmp_path / "step7" / "config.yaml").read_text() == "lr: 0.01\n"
    assert (tmp_path / "step7" / "model" / "config.json").read_bytes() == b"{}"

    fresh = TinyModule(seed=1, steps=0)
    loaded_state = Checkpointer().load(target, fresh)
    assert_identical(snapshot(fresh), saved)
    assert fresh.model.lm_head.weight is fresh.model.model.embed_tokens.weight  # still tied
    assert_identical(loaded_state, state)


def test_load_can_skip_optimizer_and_trainer_state(tmp_path, module):
    saved = snapshot(module)
    target = str(tmp_path / "step1")
    Checkpointer().save(target, module, trainer_state())
    fresh = TinyModule(seed=1, steps=0)
    assert Checkpointer().load(target, fresh, load_optimizer_state=False, load_trainer_state=False) is None
    assert_identical(fresh.model.state_dict(), saved["model"])
    assert fresh.optimizer.state == {}  # fresh: not even initialised (no zero-lr step, no step count)


class WithScheduler(TinyModule):
    """A module with extra state beside the optimizer's, as an LR scheduler has."""

    def __init__(self, seed: int = 0, steps: int = 1, scheduler_step: int = 0):
        super().__init__(seed=seed, steps=steps)
        self.scheduler_step = torch.tensor(scheduler_step)

    def extra_state_dict(self):
        return {"scheduler": {"step": self.scheduler_step}}

    def load_extra_state_dict(self, state_dict):
        self.scheduler_step = state_dict["scheduler"]["step"]


def test_extra_state_is_loaded_with_the_optimizer_and_stays_fresh_without_it(tmp_path):
    target = str(tmp_path / "step5")
    Checkpointer().save(target, WithScheduler(scheduler_step=5), trainer_state())
    with_optimizer, without = WithScheduler(seed=1, steps=0), WithScheduler(seed=1, steps=0)
    Checkpointer().load(target, with_optimizer)
    Checkpointer().load(target, without, load_optimizer_state=False)
    assert int(with_optimizer.scheduler_step) == 5 and with_optimizer.optimizer.state
    assert int(without.scheduler_step) == 0 and without.optimizer.state == {}


def test_the_marker_records_an_ephemeral_checkpoint(tmp_path, module):
    Checkpointer().save(str(tmp_path / "step1"), module, trainer_state())
    Checkpointer().save(str(tmp_path / "step2"), module, trainer_state(), ephemeral=True)
    markers = [json.loads((tmp_path / f"step{step}" / ".complete").read_text()) for step in (1, 2)]
    assert [marker["ephemeral"] for marker in markers] == [False, True]
    assert [step for step, _ in Checkpointer.find_checkpoints(str(tmp_path))] == [1, 2]


def test_one_work_folder_for_every_path(tmp_path):
    root = str(tmp_path / "work")
    local = Checkpointer(uploader=Uploader(), storage=StorageSection(work_folder=root))
    assert local.work_folder(str(tmp_path / "run")) == str(tmp_path / "run")  # a local folder is its own
    run = local.work_folder("s3://bucket/runs/a")
    assert run == work_folder_for("s3://bucket/runs/a", root)
    # a remote checkpoint goes to its save folder's work folder; any other remote folder gets its own
    assert local.work_folder("s3://bucket/runs/a/step4") == os.path.join(run, "step4")
    assert local.work_folder("s3://bucket/runs/a/hf") == work_folder_for("s3://bucket/runs/a/hf", root)
    # without an uploader, remote checkpoints are written to the URL directly
    assert Checkpointer().work_folder("s3://bucket/runs/a/step4") == "s3://bucket/runs/a/step4"


@pytest.fixture
def blocked_writer(monkeypatch):
    """Hold DCP's write until the test sets the returned event."""
    release = threading.Event()
    real_save = checkpoint_module.dcp.save

    def slow_save(*args, **kwargs):
        assert release.wait(timeout=30), "test never released the writer"
        return real_save(*args, **kwargs)

    monkeypatch.setattr(checkpoint_module.dcp, "save", slow_save)
    return release


def test_save_async_returns_before_writing_and_saves_the_state_at_the_call(tmp_path, module, blocked_writer):
    saved, state = snapshot(module), trainer_state()
    expected_state = copy.deepcopy(state)
    target = str(tmp_path / "step7")
    checkpointer = Checkpointer()
    future = checkpointer.save_async(target, module, state)

    assert not future.done() and not Checkpointer.dir_is_checkpoint(target)
    with torch.no_grad():  # training goes on while the writer waits
        for parameter in module.model.parameters():
            parameter.add_(1.0)
        for parameter_state in module.optimizer.state.values():
            parameter_state["exp_avg"].mul_(2.0)
    state["callbacks"]["checkpointer"]["permanent"].append(9)
    state["data_loader"]["order"].add_(1)

    blocked_writer.set()
    checkpointer.wait()
    assert future.done() and Checkpointer.dir_is_checkpoint(target)
    assert not os.path.exists(target + ".tmp")
    fresh = TinyModule(seed=1, steps=0)
    assert_identical(Checkpointer().load(target, fresh), expected_state)
    assert_identical(snapshot(fresh), saved)


def test_a_new_save_waits_for_the_pending_one(tmp_path, module, blocked_writer):
    checkpointer = Checkpointer()
    first = checkpointer.save_async(str(tmp_path / "step1"), module, trainer_state())
    threading.Timer(0.2, blocked_writer.set).start()
    second = checkpointer.save_async(str(tmp_path / "step2"), module, trainer_state())
    assert first.done() and Checkpointer.dir_is_checkpoint(str(tmp_path / "step1"))
    second.result()
    assert [step for step, _ in Checkpointer.find_checkpoints(str(tmp_path))] == [1, 2]


def test_wait_reraises_a_failed_async_save_naming_the_dir(tmp_path, module, monkeypatch):
    def failing_save(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint_module.dcp, "save", failing_save)
    checkpointer = Checkpointer()
    target = str(tmp_path / "step1")
    checkpointer.save_async(target, module, trainer_state())
    with pytest.raises(CheckpointError, match=r"step1: could not save checkpoint.*No space left"):
        checkpointer.wait()
    assert not Checkpointer.dir_is_checkpoint(target)
    checkpointer.wait()  # the error is reported once
    monkeypatch.undo()
    checkpointer.save(target, module, trainer_state())
    assert Checkpointer.dir_is_checkpoint(target)


def test_save_refuses_to_overwrite_unless_asked(tmp_path, module):
    target = str(tmp_path / "step1")
    Checkpointer().save(target, module, {"global_step": 1})
    with pytest.raises(CheckpointError, match=r"step1: a checkpoint already exists.*save_overwrite"):
        Checkpointer().save(target, module, {"global_step": 2})

    newer = TinyModule(seed=2)
    Checkpointer(save_overwrite=True).save(target, newer, {"global_step": 2})
    fresh = TinyModule(seed=1, steps=0)
    assert Checkpointer().load(target, fresh) == {"global_step": 2}
    assert_identical(snapshot(fresh), snapshot(newer))
    assert sorted(os.listdir(tmp_path)) == ["step1"]


def make_layout(folder, module) -> None:
    """step1, step3 and step10 complete; step2 without marker; step4.tmp half written."""
    for step in (1, 3, 10):
        Checkpointer().save(str(folder / f"step{step}"), module, {"global_step": step})
    (folder / "step2" / "model_and_optim").mkdir(parents=True)
    (folder / "step4.tmp" / "train").mkdir(parents=True)
    (folder / "notes.txt").write_text("not a checkpoint")


def test_find_latest_and_contains_see_only_complete_checkpoints(tmp_path, module):
    make_layout(tmp_path, module)
    folder = str(tmp_path)
    assert Checkpointer.find_checkpoints(folder) == [
        (1, str(tmp_path / "step1")),
        (3, str(tmp_path / "step3")),
        (10, str(tmp_path / "step10")),
    ]
    assert Checkpointer.latest_checkpoint(folder) == str(tmp_path / "step10")
    assert Checkpointer.contains_checkpoint(folder)
    assert not Checkpointer.dir_is_checkpoint(str(tmp_path / "step2"))

    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "step5").mkdir()
    assert not Checkpointer.contains_checkpoint(str(empty))
    assert Checkpointer.find_checkpoints(str(tmp_path / "missing")) == []
    with pytest.raises(FileNotFoundError, match="empty"):
        Checkpointer.latest_checkpoint(str(empty))


def test_clean_incomplete_removes_leftovers_and_finishes_an_interrupted_rename(tmp_path, module):
    make_layout(tmp_path, module)
    # A save that crashed after writing its marker but before the rename.
    os.rename(tmp_path / "step10", tmp_path / "step11.tmp")

    removed = Checkpointer.clean_incomplete(str(tmp_path))
    assert sorted(removed) == [str(tmp_path / "step2"), str(tmp_path / "step4.tmp")]
    assert sorted(os.listdir(tmp_path)) == ["notes.txt", "step1", "step11", "step3"]
    assert Checkpointer.latest_checkpoint(str(tmp_path)) == str(tmp_path / "step11")


def test_fsspec_urls_work_like_local_paths(module):
    import fsspec

    folder = "memory://honing-test-checkpoint"
    try:
        checkpointer = Checkpointer()
        checkpointer.save(f"{folder}/step1", module, {"global_step": 1}, extra_files={"model/config.json": "{}"})
        checkpointer.save_async(f"{folder}/step2", module, {"global_step": 2})
        checkpointer.wait()
        assert Checkpointer.find_checkpoints(folder) == [(1, f"{folder}/step1"), (2, f"{folder}/step2")]
        fresh = TinyModule(seed=1, steps=0)
        assert checkpointer.load(f"{folder}/step2", fresh) == {"global_step": 2}
        assert_identical(snapshot(fresh), snapshot(module))
        checkpointer.delete(f"{folder}/step1")
        assert Checkpointer.latest_checkpoint(folder) == f"{folder}/step2"
    finally:
        fsspec.filesystem("memory").rm("/honing-test-checkpoint", recursive=True)


def test_delete_removes_the_marker_first(tmp_path, module, monkeypatch):
    target = str(tmp_path / "step1")
    Checkpointer().save(target, module, {})
    removed = []
    real_rm = honing.storage.rm
    monkeypatch.setattr(honing.storage, "rm", lambda path: (removed.append(path), real_rm(path)))
    Checkpointer().delete(target)
    assert removed == [os.path.join(target, ".complete"), target]
    assert not os.path.exists(target)


@pytest.mark.parametrize("damage", ["truncate", "delete", "metadata"])
def test_corrupt_model_data_raises_checkpoint_error_naming_the_dir(tmp_path, module, damage):
    target = str(tmp_path / "step1")
    Checkpointer().save(target, module, {})
    (data_file,) = glob.glob(os.path.join(target, "model_and_optim", "*.distcp"))
    if damage == "truncate":
        os.truncate(data_file, os.path.getsize(data_file) // 2)
    elif damage == "delete":
        os.remove(data_file)
    else:
        os.truncate(os.path.join(target, "model_and_optim", ".metadata"), 10)
    with pytest.raises(CheckpointError, match=rf"^{re.escape(target)}: cannot load model and optimizer state: .+"):
        Checkpointer().load(target, TinyModule(seed=1, steps=0))


def test_corrupt_trainer_state_raises_before_touching_the_model(tmp_path, module):
    target = str(tmp_path / "step1")
    Checkpointer().save(target, module, {"global_step": 1})
    (tmp_path / "step1" / "train" / "rank0.pt").write_bytes(b"not a torch file")
    fresh = TinyModule(seed=1, steps=0)
    before = snapshot(fresh)
    expected = rf"^{re.escape(target)}: cannot read trainer state .*rank0\.pt: \w+Error: ."
    with pytest.raises(CheckpointError, match=expected):
        Checkpointer().load(target, fresh)
    assert_identical(snapshot(fresh), before)


def test_incomplete_dir_is_never_loaded(tmp_path, module):
    target = str(tmp_path / "step1")
    Checkpointer().save(target, module, {})
    os.remove(os.path.join(target, ".complete"))
    with pytest.raises(CheckpointError, match=rf"^{re.escape(target)}: not a complete checkpoint"):
        Checkpointer().load(target, TinyModule(seed=1, steps=0))


def test_a_rank_without_its_own_file_gets_rank0s_state_flagged(tmp_path, module, monkeypatch):
    target = str(tmp_path / "step1")
    Checkpointer().save(target, module, {"global_step": 1})
    monkeypatch.setattr(checkpoint_module, "get_rank", lambda: 1)
    assert Checkpointer().load(target, TinyModule(seed=1, steps=0)) == {"global_step": 1, "_world_size_changed": True}


class Opaque:
    """Picklable, but not something torch.load(weights_only=True) accepts."""


def test_trainer_state_that_cannot_be_resumed_is_refused_at_save_time(tmp_path, module):
    with pytest.raises(CheckpointError, match=r"step1: the trainer state cannot be checkpointed.*Opaque"):
        Checkpointer().save(str(tmp_path / "step1"), module, {"callbacks": {"custom": Opaque()}})
    with pytest.raises(CheckpointError, match=r"step1: the trainer state cannot be checkpointed.*lambda"):
        Checkpointer().save_async(str(tmp_path / "step1"), module, {"callbacks": {"custom": lambda: 1}})
    with pytest.raises(CheckpointError, match=r"extra file name '\.\./escape'"):
        Checkpointer().save(str(tmp_path / "step1"), module, {}, extra_files={"../escape": "x"})
    assert os.listdir(tmp_path) == []


WORKER = textwrap.dedent("""
    import os, sys
    import torch
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
    from torch.distributed.fsdp import fully_shard
    from honing.distributed import get_rank, prepare_training_environment, teardown_training_environment
    from honing.errors import CheckpointError
    from honing.train.checkpoint import Checkpointer
    from honing.train.train_module import ModelState
    from tests.helpers import tiny_llama

    torch.set_num_threads(1)
    FULL = StateDictOptions(full_state_dict=True)  # on every rank (cpu_offload would keep it on rank 0 only)

    class Sharded(ModelState):
        def __init__(self, seed, steps):
            self.model = tiny_llama(seed=seed, tie_word_embeddings=True)
            fully_shard(self.model)
            self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-2)
            generator = torch.Generator().manual_seed(seed + get_rank())  # each rank its own batch
            for _ in range(steps):
                ids = torch.randint(0, 64, (2, 8), generator=generator)
                self.model(input_ids=ids, labels=ids).loss.backward()
                self.optimizer.step()
                self.optimizer.zero_grad()

        def full(self):
            model, optim = get_state_dict(self.model, self.optimizer, options=FULL)
            return model, optim["state"]

    def same(a, b):
        if isinstance(a, torch.Tensor):
            return torch.equal(a, b)
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, (list, tuple)):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        return a == b

    folder = sys.argv[1]
    prepare_training_environment(seed=0)
    rank = get_rank()
    module = Sharded(seed=0, steps=1)
    expected = module.full()
    checkpointer = Checkpointer()
    checkpointer.save(f"{folder}/step1", module, {"rank": rank})
    future = checkpointer.save_async(f"{folder}/step2", module, {"rank": rank, "rng": torch.get_rng_state()})
    with torch.no_grad():
        for parameter in module.model.parameters():
            parameter.to_local().add_(1.0)
    assert not same(module.full(), expected)  # the live shards did change while the save was pending
    checkpointer.wait()
    assert future.done() and Checkpointer.dir_is_checkpoint(f"{folder}/step2")
    for step in (1, 2):
        fresh = Sharded(seed=1, steps=0)
        state = Checkpointer().load(f"{folder}/step{step}", fresh)
        assert state["rank"] == rank, (step, state)
        assert same(fresh.full(), expected), f"step{step} differs on rank {rank}"
    # rank 1's trainer state of step2 goes bad: the load fails on both ranks (rank 0 would otherwise wait in the
    # collective read while rank 1 falls back), and both can fall back to step1 together
    torch.distributed.barrier()
    if rank == 1:
        open(f"{folder}/step2/train/rank1.pt", "wb").write(b"not a checkpoint")
    torch.distributed.barrier()
    try:
        Checkpointer().load(f"{folder}/step2", Sharded(seed=1, steps=0))
        raise AssertionError(f"rank {rank} loaded step2")
    except CheckpointError as error:
        expected_message = "cannot read trainer state" if rank == 1 else "rank(s) 1 cannot read their trainer state"
        assert expected_message in str(error), str(error)
    assert Checkpointer().load(f"{folder}/step1", Sharded(seed=1, steps=0))["rank"] == rank
    teardown_training_environment()
    print(f"rank {rank} ok")
""")


@pytest.mark.slow
def test_two_ranks_on_gloo_save_and_load_sharded_state(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    folder = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": REPO, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script), str(folder)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "rank 0 ok" in result.stdout and "rank 1 ok" in result.stdout
    assert sorted(os.listdir(folder / "step2" / "train")) == ["rank0.pt", "rank1.pt"]
    assert len(glob.glob(str(folder / "step2" / "model_and_optim" / "*.distcp"))) == 2
