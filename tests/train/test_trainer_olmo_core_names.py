"""The Trainer's names from OLMo-core's ``olmo_core.train`` document, with the document's meaning: ``work_dir``,
``device``, ``convert_duration_to_steps``, ``checkpoint_loaded``, ``load_checkpoint`` on a folder of checkpoints,
``write_file(dir=)``, ``persist_working_file`` / ``persist_working_subdir``, ``get_metric(name, namespace)``,
``run_bookkeeping_op(op, cb=...)`` and the bookkeeping fields, ``global_train_petaflops``, and the fields that
are settings of the trainer section."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from honing.errors import ConfigError
from honing.train import Duration, Trainer
from honing.train import trainer_setup as trainer_module
from honing.train.callbacks.base import Callback
from honing.train.trainer_bookkeeping import log as bookkeeping_log
from tests.helpers import flat_weights, make_trainer

STEP_TOKENS = 8 * 16  # make_trainer: 8 rows of 16 tokens a step, 64 rows (8 steps) an epoch


def with_fields(save_folder, **fields) -> Trainer:
    """make_trainer's run, its Trainer built with OLMo-core's fields that are not trainer-section settings."""
    parts = make_trainer(save_folder)
    return Trainer(
        parts.config,
        train_module=parts.train_module,
        data_loader=parts.data_loader,
        callbacks=dict(parts.callbacks),
        **fields,
    )


def test_convert_duration_to_steps(tmp_path):
    trainer = make_trainer(tmp_path)
    assert trainer.convert_duration_to_steps(Duration.steps(7)) == 7
    assert trainer.convert_duration_to_steps(Duration.epochs(2)) == 16
    assert trainer.convert_duration_to_steps(Duration.tokens(5 * STEP_TOKENS + 1)) == 6  # a started step counts
    assert trainer.convert_duration_to_steps("3epochs") == 24
    trainer.data_loader = SimpleNamespace(epoch=1)  # a loader that knows neither its epoch nor its batch tokens
    with pytest.raises(RuntimeError, match="batches per epoch"):
        trainer.convert_duration_to_steps(Duration.epochs(1))
    with pytest.raises(RuntimeError, match="same number of tokens"):
        trainer.convert_duration_to_steps(Duration.tokens(1000))


def test_load_checkpoint_on_a_save_folder_loads_its_newest_checkpoint(tmp_path):
    first = make_trainer(tmp_path / "a", max_duration="8steps", dropout=0.0)
    first.fit()  # step4 and step8
    other = make_trainer(tmp_path / "b", max_duration="8steps", dropout=0.0)
    assert not other.checkpoint_loaded
    other.load_checkpoint(str(tmp_path / "a"))  # the folder of checkpoints, as OLMo-core's load_checkpoint takes
    assert other.checkpoint_loaded and other.global_step == 8
    assert torch.equal(flat_weights(other), flat_weights(first))
    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
        make_trainer(tmp_path / "c").load_checkpoint(str(tmp_path / "empty"))


def test_a_checkpoint_loaded_before_fit_is_the_one_fit_starts_from(tmp_path):
    make_trainer(tmp_path, max_duration="8steps").fit()  # the save folder holds step4 and step8
    trainer = make_trainer(tmp_path, max_duration="10steps", save_overwrite=True)
    trainer.load_checkpoint(str(tmp_path / "step4"))
    trained = []
    trainer.add_callback("steps", type("Steps", (Callback,), {"on_step_end": lambda self: trained.append(self.step)})())
    trainer.fit()  # OLMo-core's fit loads nothing more once a checkpoint is loaded: not step8
    assert trained == [5, 6, 7, 8, 9, 10]


def test_work_dir_write_file_and_persisting_working_files(tmp_path):
    save, work = tmp_path / "save", tmp_path / "work"
    assert make_trainer(save).work_dir == Path(save)  # a local save folder is its own work folder by default
    trainer = with_fields(save, work_dir=str(work))
    assert trainer.work_dir == work and trainer.work_folder == str(work)

    (work / "traces" / "rank0").mkdir(parents=True)
    (work / "traces" / "rank0" / "trace.json").write_text("{}")
    (work / "notes.txt").write_text("hello")
    assert trainer.persist_working_file("notes.txt") == str(save / "notes.txt")  # relative to work_dir
    assert trainer.persist_working_file(work / "notes.txt") == str(save / "notes.txt")  # or a path inside it
    assert trainer.persist_working_subdir("traces") == str(save / "traces")
    assert (save / "notes.txt").read_text() == "hello"
    assert (save / "traces" / "rank0" / "trace.json").read_text() == "{}"
    with pytest.raises(NotADirectoryError):
        trainer.persist_working_subdir("notes.txt")
    with pytest.raises(FileNotFoundError):
        trainer.persist_working_file("missing.txt")

    assert trainer.write_file("summary.json", '{"ok": true}') == str(save / "summary.json")
    assert trainer.write_file("copy.bin", b"\x00\x01", dir=tmp_path / "elsewhere") == str(
        tmp_path / "elsewhere" / "copy.bin"
    )
    assert (save / "summary.json").read_text() == '{"ok": true}'
    assert (tmp_path / "elsewhere" / "copy.bin").read_bytes() == b"\x00\x01"


def test_get_metric_takes_a_namespace(tmp_path):
    seen = {}

    class ReadLoss(Callback):
        def on_step_end(self):
            seen[self.step] = (
                self.trainer.get_metric("loss", namespace="train"),
                self.trainer.get_metric("loss", "train/"),
                self.trainer.get_metric("train/loss"),
                self.trainer.get_metric("train/loss", self.step),  # honing's earlier get_metric(name, step)
            )

    make_trainer(tmp_path, max_duration="2steps", callbacks={"read": ReadLoss()}).fit()
    for values in seen.values():
        assert values[0] is not None and all(torch.equal(values[0], value) for value in values[1:])


def test_run_bookkeeping_op_calls_cb_with_the_result(tmp_path):
    trainer = make_trainer(tmp_path)
    results, threads = [], []

    def add(a, b, *, scale=1):  # takes no cb: cb is the trainer's, not passed on (OLMo-core's meaning)
        threads.append(threading.current_thread().name)
        return (a + b) * scale

    future = trainer.run_bookkeeping_op(add, 1, 2, scale=10, cb=results.append, op_name="add")
    assert future.result() == 30
    trainer.wait_for_bookkeeping()
    assert results == [30] and threads[0].startswith("honing-bookkeeping")
    # distributed=False: the pool of threads for ops without collectives
    trainer.run_bookkeeping_op(add, 1, 1, cb=results.append, distributed=False).result()
    assert threads[1].startswith("honing-bookkeeping-io") and results == [30, 2]
    assert isinstance(trainer.single_thread_pool, ThreadPoolExecutor)
    assert isinstance(trainer.multi_thread_pool, ThreadPoolExecutor)
    assert trainer.bookkeeping_pg is None and trainer.bookkeeping_device == torch.device("cpu")  # one process
    assert trainer.async_bookkeeping is True and trainer.bookkeeping_soft_timeout == 30


def test_run_bookkeeping_op_allow_multiple_false_skips_while_one_runs(tmp_path):
    trainer = make_trainer(tmp_path)
    release, calls = threading.Event(), []

    def slow(label):
        calls.append(label)
        release.wait(10)

    first = trainer.run_bookkeeping_op(slow, "first", op_name="slow", allow_multiple=False)
    for _ in range(5000):  # until the pool's thread has started it (at most 5 s)
        if first.running():
            break
        time.sleep(0.001)
    queued = trainer.run_bookkeeping_op(slow, "queued", op_name="other")
    skipped = trainer.run_bookkeeping_op(slow, "skipped", op_name="slow", allow_multiple=False)
    assert skipped is first  # the running call's future: this one is not made
    release.set()
    trainer.wait_for_bookkeeping()
    assert calls == ["first", "queued"] and queued.done()
    with pytest.warns(DeprecationWarning, match="allow_multiple"):
        trainer.run_bookkeeping_op(calls.append, "old", cancel_in_progress=False).result()


def test_async_bookkeeping_false_runs_ops_on_the_training_thread_and_slow_ops_are_warned(tmp_path, caplog):
    trainer = with_fields(tmp_path, async_bookkeeping=False, bookkeeping_soft_timeout=0.0)
    names = []
    with caplog.at_level(logging.WARNING, logger=bookkeeping_log.name):
        future = trainer.run_bookkeeping_op(lambda: names.append(threading.current_thread().name) or 7, op_name="x")
    assert future.result() == 7 and names == ["MainThread"]
    assert "bookkeeping op 'x' took" in caplog.text


def test_device_is_the_train_modules_unless_given(tmp_path):
    assert make_trainer(tmp_path).device == torch.device("cpu")  # the model's
    assert with_fields(tmp_path, device="cpu").device == torch.device("cpu")
    with pytest.raises(ConfigError, match="device: cuda was given, but the train module's model is on cpu"):
        with_fields(tmp_path, device="cuda")


def test_global_train_petaflops_counts_the_trained_steps_and_is_checkpointed(tmp_path):
    trainer = make_trainer(tmp_path, max_duration="4steps")
    trainer.fit()
    per_step = STEP_TOKENS * trainer.train_module.num_flops_per_token(16) / 1e15
    assert trainer.global_train_petaflops == pytest.approx(4 * per_step)
    resumed = make_trainer(tmp_path, max_duration="6steps")
    resumed.fit()
    assert resumed.global_train_petaflops == pytest.approx(6 * per_step)


def test_the_trainer_sections_settings_are_trainer_fields(tmp_path):
    trainer = make_trainer(tmp_path, load_path=str(tmp_path / "other"), load_trainer_state=False)
    assert trainer.metrics_collect_interval == 2 and trainer.load_path == str(tmp_path / "other")
    assert trainer.load_trainer_state is False and trainer.load_optim_state is None and not trainer.save_overwrite
    trainer.metrics_collect_interval = 5
    trainer.save_overwrite = True
    assert trainer.config.metrics_collect_interval == 5 and trainer.checkpointer.save_overwrite is True


def test_cancel_run_with_no_sync_cancels_at_once(tmp_path):
    seen = []

    class CancelAtTwo(Callback):
        def on_step_end(self):
            if self.step == 2:
                self.trainer.cancel_run("every rank asks at once", no_sync=True)
                seen.append(self.trainer.is_canceled)  # no exchange to wait for: canceled now

    trainer = make_trainer(tmp_path, max_duration="6steps", callbacks={"cancel": CancelAtTwo()})
    trainer.fit()
    assert seen == [True] and trainer.global_step == 2 and trainer.cancel_reason == "every rank asks at once"


def test_a_data_parallel_group_smaller_than_the_world_is_refused(monkeypatch):
    # as on 4 ranks given a group of 2 (TP beside DP): the Trainer reduces over every rank, so it says so
    monkeypatch.setattr(trainer_module, "is_distributed", lambda: True)
    monkeypatch.setattr(trainer_module, "get_world_size", lambda: 4)
    monkeypatch.setattr(trainer_module.dist, "get_world_size", lambda group=None: 2)
    with pytest.raises(ConfigError, match="dp_process_group: a group of 2 of the 4 ranks is not supported"):
        trainer_module.check_dp_group(object())
    monkeypatch.setattr(trainer_module.dist, "get_world_size", lambda group=None: 4)
    group = object()
    assert trainer_module.check_dp_group(group) is group  # every rank: what the Trainer uses anyway
