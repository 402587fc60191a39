"""OLMo-core's ``TrainerConfig`` and ``CheckpointerConfig`` as its document lists them: every field, in its order,
with its default (or honing's, for the reason docs/coming-from.md gives), each reaching the Trainer it builds;
the callbacks OLMo-core's trainer adds unless given (so a canceled Python-API run saves a checkpoint); and
``prepare_training_environment(backend=None)``: no process group."""

from __future__ import annotations

import dataclasses
import logging

import pytest
import torch

import honing.distributed
from honing.data.loader import DataLoader
from honing.errors import ConfigError
from honing.interop.olmo_core import CheckpointerConfig, TrainerConfig
from honing.methods.lm import LMTrainModule
from honing.optim.param_groups import build_adamw
from honing.train import Callback, Duration, prepare_training_environment
from honing.train.callbacks.checkpointer import CheckpointerCallback
from honing.train.callbacks.console import ConsoleCallback
from honing.train.callbacks.gc import GarbageCollectorCallback
from honing.train.callbacks.speed_monitor import SpeedMonitorCallback
from honing.train.checkpoint import Checkpointer
from tests.helpers import TokenDataset, tiny_llama

#: the document's ``TrainerConfig(...)`` signature, in its order, with its defaults (honing's own where noted)
DOCUMENTED_FIELDS = {
    "save_folder": dataclasses.MISSING,
    "work_dir": None,
    "load_path": None,
    "load_strategy": "if_available",
    "load_optim_state": None,
    "load_trainer_state": None,
    "checkpointer": CheckpointerConfig(),
    "device": None,
    "save_overwrite": False,
    "max_duration": Duration.epochs(1),
    "cancel_check_interval": 1,  # OLMo-core's 25: honing's check costs the loop nothing (docs/coming-from.md)
    "hard_stop": None,
    "metrics_collect_interval": 5,
    "callbacks": {},
    "async_bookkeeping": None,
    "bookkeeping_soft_timeout": 30,
    "no_checkpoints": False,
    "no_evals": False,
    "steps_to_skip": None,
}


def parts():
    model = tiny_llama(seed=0)
    module = LMTrainModule(
        model, build_adamw(model, lr=1e-3, weight_decay=0.0, betas=(0.9, 0.95), eps=1e-8), micro_batch_size=4
    )
    return module, DataLoader(TokenDataset(rows=64), global_batch_size=8, seed=0)


class CancelAt(Callback):
    """Cancels the run after step ``at``."""

    def __init__(self, at: int):
        self.at = at

    def post_step(self) -> None:
        if self.step == self.at:
            self.trainer.cancel_run("a test's cancel")


def test_trainer_config_has_the_documents_fields_in_its_order_with_its_defaults():
    found = {}
    for item in dataclasses.fields(TrainerConfig):
        found[item.name] = item.default_factory() if item.default_factory is not dataclasses.MISSING else item.default
    assert list(found) == list(DOCUMENTED_FIELDS)
    assert found == DOCUMENTED_FIELDS
    assert [item.name for item in dataclasses.fields(CheckpointerConfig)] == [
        "work_dir",
        "save_overwrite",
        "pre_download",
        "save_thread_count",
        "load_thread_count",
        "throttle_uploads",
    ]


def test_a_python_built_trainer_gets_olmo_cores_default_callbacks(tmp_path):
    trainer = TrainerConfig(save_folder=str(tmp_path), max_duration=Duration.steps(2)).build(*parts())
    callbacks = trainer.callbacks
    assert isinstance(callbacks["console_logger"], ConsoleCallback)
    assert isinstance(callbacks["speed_monitor"], SpeedMonitorCallback)
    assert callbacks["checkpointer"].save_interval == 250  # OLMo-core's CheckpointerCallback default
    assert isinstance(callbacks["garbage_collector"], GarbageCollectorCallback)
    assert callbacks["garbage_collector"].interval == 1000  # OLMo-core's gc_interval default
    # a callback of the same kind, under any name, stands in for the default
    given = CheckpointerCallback(save_interval=3)
    built = TrainerConfig(save_folder=str(tmp_path / "b")).with_callback("my_checkpoints", given).build(*parts())
    assert built.callbacks["my_checkpoints"] is given and "checkpointer" not in built.callbacks


def test_a_canceled_python_api_run_saves_a_checkpoint(tmp_path):
    trainer = (
        TrainerConfig(save_folder=str(tmp_path), max_duration=Duration.steps(10))
        .with_callback("cancel", CancelAt(3))
        .build(*parts())
    )
    trainer.fit()
    assert trainer.is_canceled and trainer.global_step == 3
    assert Checkpointer.latest_checkpoint(str(tmp_path)) == str(tmp_path / "step3")  # the default checkpointer's


def test_every_field_reaches_what_it_sets(tmp_path):
    config = TrainerConfig(
        save_folder=str(tmp_path / "save"),
        work_dir=str(tmp_path / "work"),
        device="cpu",
        metrics_collect_interval=3,
        async_bookkeeping=False,
        bookkeeping_soft_timeout=7,
        save_overwrite=True,
        checkpointer=CheckpointerConfig(
            work_dir=str(tmp_path / "staging"),
            save_overwrite=False,
            pre_download=True,
            save_thread_count=2,
            load_thread_count=4,
            throttle_uploads=True,
        ),
    )
    trainer = config.build(*parts(), dp_process_group=None, checkpointer_pg=None)
    assert trainer.work_dir == tmp_path / "work" and trainer.device == torch.device("cpu")
    assert trainer.metrics_collect_interval == 3 and trainer.async_bookkeeping is False
    assert trainer.bookkeeping_soft_timeout == 7 and trainer.dp_process_group is None
    checkpointer = trainer.checkpointer
    assert checkpointer.work_root == str(tmp_path / "staging") and checkpointer.save_overwrite is False
    assert checkpointer.pre_download and checkpointer.load_thread_count == 4 and checkpointer.save_thread_count == 2
    assert checkpointer.throttle_uploads and checkpointer.process_group is None
    # without a work_dir of its own, the checkpointer stages remote checkpoints under the trainer's
    staged = TrainerConfig(save_folder="s3://bucket/run", work_dir=str(tmp_path / "work")).build(*parts())
    assert staged.checkpointer.work_root == str(tmp_path / "work")


def test_backend_none_means_no_process_group(monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun sets them
    joined = []
    monkeypatch.setattr(honing.distributed.dist, "init_process_group", lambda **kwargs: joined.append(kwargs))
    prepare_training_environment(seed=0, backend=None)
    assert joined == []  # OLMo-core's None: non-distributed training
    prepare_training_environment(seed=0)  # the default: join, with the backend honing picks (gloo on a CPU)
    expected = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    assert [call["backend"] for call in joined] == [expected]
    prepare_training_environment(seed=0, backend="gloo")
    assert joined[-1]["backend"] == "gloo"


@pytest.mark.parametrize("bad", [{"save_thread_count": 0}, {"load_thread_count": -1}])
def test_thread_counts_below_one_are_refused(tmp_path, bad):
    with pytest.raises(ConfigError, match="expected at least 1 thread"):
        TrainerConfig(save_folder=str(tmp_path), checkpointer=CheckpointerConfig(**bad)).build(*parts())


def test_log_filter_type_and_shared_filesystem_as_documented(monkeypatch):
    honing_log, level = logging.getLogger("honing"), logging.getLogger("honing").level
    monkeypatch.setenv("RANK", "1")  # a rank other than 0, before any process group
    monkeypatch.delenv("LOG_FILTER_TYPE", raising=False)
    try:
        prepare_training_environment(shared_filesystem=True)
        assert honing_log.level == logging.WARNING and honing.distributed.shared_filesystem() is True
        prepare_training_environment(log_filter_type="all_ranks", shared_filesystem=False)
        assert honing_log.level == logging.INFO and honing.distributed.shared_filesystem() is False
        monkeypatch.setenv("LOG_FILTER_TYPE", "local_rank0_only")  # LOCAL_RANK unset: 0
        prepare_training_environment()
        assert honing_log.level == logging.INFO and honing.distributed.shared_filesystem() is None
        with pytest.raises(ConfigError, match="log_filter_type: expected one of"):
            prepare_training_environment(log_filter_type="everyone")
    finally:
        honing_log.setLevel(level)
