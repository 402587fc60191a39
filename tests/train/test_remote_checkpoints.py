"""Remote save folders: checkpoints written to a local work copy, uploaded in the background (Uploader) to a
real S3 server on loopback, marked complete only once whole, surviving an outage, resumed bit-exactly."""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time

import fsspec.config
import pytest
import torch

import honing.storage
from honing.config.schema import StorageSection
from honing.errors import CheckpointError
from honing.train.callbacks.base import Callback
from honing.train.callbacks.checkpointer import CheckpointerCallback
from honing.train.checkpoint import MARKER, Checkpointer
from honing.train.remote import Uploader, UploadError, work_folder_for
from tests.helpers import flat_weights, make_trainer

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """Work folders under this test's tmp_path; the cwd too, for callbacks that write SAVE_FOLDER with os.path."""
    monkeypatch.setenv("HONING_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)


def fast(trainer, wait_seconds: float = 60.0):
    """Retry uploads every 20-200 ms (the defaults are 1-60 s) and bound the final wait."""
    trainer.checkpointer.uploader.retry_initial_seconds = 0.02
    trainer.checkpointer.uploader.retry_max_seconds = 0.2
    trainer.checkpointer.upload_wait_seconds = wait_seconds
    return trainer


class SavedSizes(Callback):
    """Records each saved checkpoint's local files and sizes (what must arrive remotely)."""

    def __init__(self):
        self.sizes: dict[str, dict[str, int]] = {}

    def on_checkpoint_saved(self, path: str) -> None:
        local = self.trainer.checkpointer.work_folder(path)
        self.sizes[os.path.basename(path)] = honing.storage.file_sizes(local)


class AtStep(Callback):
    """Runs ``action(trainer)`` at the end of ``step``, before that step's checkpoint is saved."""

    def __init__(self, step: int, action):
        self.at, self.action = step, action

    def on_step_end(self) -> None:
        if self.step == self.at:
            self.action(self.trainer)


def remote_steps(keys: dict[str, int]) -> dict[str, dict[str, int]]:
    """Remote objects grouped by their top folder: ``{"step4": {"train/rank0.pt": size, ...}}``."""
    grouped: dict[str, dict[str, int]] = {}
    for key, size in keys.items():
        top, _, rest = key.partition("/")
        if rest:
            grouped.setdefault(top, {})[rest] = size
    return grouped


def assert_marked_means_whole(keys: dict[str, int], saved: dict[str, dict[str, int]]) -> None:
    """Every remote stepN with a marker holds every file of its local copy, with the local size."""
    for name, files in remote_steps(keys).items():
        if MARKER in files:
            assert files == saved[name], name


def wait_until(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# --- the uploader on its own (local destination) -----------------------------------------------
def make_folder(root, files: dict[str, bytes]) -> str:
    for name, data in files.items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(data)
    return str(root)


@pytest.fixture
def events(monkeypatch):
    """Every file the uploader puts, and what the destination held when it wrote a marker."""
    log_ = []
    put_file, put_bytes = Uploader._put_file, Uploader._put_bytes

    def record_put(self, fs, source, target):
        log_.append(("file", os.path.basename(target)))
        put_file(self, fs, source, target)

    def record_marker(self, fs, target, data):
        log_.append(("marker", honing.storage.file_sizes(os.path.dirname(target))))
        put_bytes(self, fs, target, data)

    monkeypatch.setattr(Uploader, "_put_file", record_put)
    monkeypatch.setattr(Uploader, "_put_bytes", record_marker)
    return log_


def test_a_folder_gets_its_marker_last_once_every_file_has_its_size(tmp_path, events):
    source = make_folder(tmp_path / "step4", {"a.bin": b"x" * 10, "sub/b.bin": b"y" * 20, MARKER: b'{"world_size": 1}'})
    target = str(tmp_path / "copy" / "step4")
    uploader = Uploader(StorageSection(retry_initial_seconds=0.01))
    uploader.upload_folder(source, target, marker=MARKER)
    assert uploader.wait(10)
    assert events == [("file", "a.bin"), ("file", "b.bin"), ("marker", {"a.bin": 10, "sub/b.bin": 20})]
    assert honing.storage.file_sizes(target) == {"a.bin": 10, "sub/b.bin": 20, MARKER: 17}
    assert honing.storage.read_bytes(os.path.join(target, MARKER)) == b'{"world_size": 1}'
    assert uploader.is_confirmed(target) and uploader.pending == []


def test_a_file_that_arrives_short_is_sent_again_before_the_marker(tmp_path, events, monkeypatch, caplog):
    source = make_folder(tmp_path / "hf", {"a.bin": b"x" * 10, "b.bin": b"y" * 20})
    target = str(tmp_path / "copy" / "hf")
    put_file = Uploader._put_file
    truncated = []

    def short_once(self, fs, src, dst):
        put_file(self, fs, src, dst)
        if dst.endswith("b.bin") and not truncated:
            truncated.append(dst)
            os.truncate(dst, 5)  # a transfer cut short

    monkeypatch.setattr(Uploader, "_put_file", short_once)
    uploader = Uploader(StorageSection(retry_initial_seconds=0.01))
    with caplog.at_level(logging.WARNING, logger="honing.train.remote"):
        uploader.upload_folder(source, target, marker=MARKER)
        assert uploader.wait(10)
    # the second attempt re-sends only the short file; the marker (here "{}": hf has none) comes after
    assert events == [("file", "a.bin"), ("file", "b.bin"), ("file", "b.bin"), ("marker", {"a.bin": 10, "b.bin": 20})]
    assert honing.storage.read_bytes(os.path.join(target, MARKER)) == b"{}"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "b.bin (5 bytes, expected 20)" in warnings[0] and UploadError.__name__ in warnings[0]
    assert "work again after 1 failed attempt(s)" in warnings[1]


def test_an_outage_is_reported_once_and_the_queue_catches_up_in_order(tmp_path, monkeypatch, caplog):
    step1 = make_folder(tmp_path / "work" / "step1", {"data": b"1" * 8, MARKER: b"{}"})
    metrics = make_folder(tmp_path / "work", {"metrics.jsonl": b'{"step": 1}\n'})
    dest = tmp_path / "remote"
    attempts = {"left": 4}
    put_file = Uploader._put_file
    queued = threading.Event()

    def down_four_times(self, fs, source, target):
        assert queued.wait(10)  # every task is in the queue before the first failure is reported
        if attempts["left"]:
            attempts["left"] -= 1
            raise ConnectionError("Could not connect to the endpoint URL")
        put_file(self, fs, source, target)

    monkeypatch.setattr(Uploader, "_put_file", down_four_times)
    uploader = Uploader(StorageSection(retry_initial_seconds=0.01, retry_max_seconds=0.02))
    with caplog.at_level(logging.DEBUG, logger="honing.train.remote"):
        uploader.upload_folder(step1, str(dest / "step1"), marker=MARKER)
        uploader.upload_file(os.path.join(metrics, "metrics.jsonl"), str(dest / "metrics.jsonl"))
        uploader.upload_file(os.path.join(metrics, "metrics.jsonl"), str(dest / "metrics.jsonl"))  # merged
        uploader.delete_folder(str(dest / "step1"), marker=MARKER)
        queued.set()
        assert uploader.wait(10)
    assert os.listdir(dest) == ["metrics.jsonl"]  # uploaded, then deleted: the order was kept
    assert uploader.confirmed() == [str(dest / "metrics.jsonl")]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert warnings[0].startswith(f"cannot upload to {dest}: ConnectionError: Could not connect")
    assert "3 upload(s) are retried every 0.01-0.02 s" in warnings[0]
    assert "work again after 4 failed attempt(s); 2 task(s) left" in warnings[1]


def test_a_local_copy_is_deleted_only_after_the_uploads_reading_it(tmp_path):
    checkpointer = Checkpointer()
    target = make_folder(tmp_path / "run" / "step1", {"train/rank0.pt": b"0" * 30, MARKER: b'{"world_size": 1}'})
    gate = threading.Event()
    blocked = Uploader(StorageSection(retry_initial_seconds=0.01))
    blocked._put_file = lambda fs, source, dest: gate.wait(10) and Uploader._put_file(blocked, fs, source, dest)
    checkpointer.add_uploader(blocked)
    blocked.upload_folder(target, str(tmp_path / "copy" / "step1"), marker=MARKER)
    checkpointer.delete(target)
    assert Checkpointer.dir_is_checkpoint(target)  # still read by the copy
    gate.set()
    assert checkpointer.wait_for_uploads(10)
    assert not os.path.exists(target)
    assert honing.storage.file_sizes(str(tmp_path / "copy" / "step1"))[MARKER] == 17


def test_work_folders_are_per_url_and_readable(monkeypatch):
    monkeypatch.setenv("HONING_CACHE_DIR", "/cache")
    folder = work_folder_for("s3://bucket/runs/a/")
    assert folder.startswith("/cache/work/bucket_runs_a-")
    assert len(os.path.basename(folder)) == len("bucket_runs_a-") + 12
    assert work_folder_for("s3://bucket/runs/a") == folder
    assert work_folder_for("s3://bucket/runs/b") != folder
    assert work_folder_for("s3://bucket/runs/a", "/scratch").startswith("/scratch/bucket_runs_a-")


def test_storage_secrets_are_redacted_from_messages(monkeypatch):
    monkeypatch.setitem(fsspec.config.conf, "s3", {})
    honing.storage.set_storage_options(
        "s3",
        **honing.storage.s3_storage_options(
            endpoint_url="http://127.0.0.1:9",
            aws_access_key_id="AKIAHONING",
            aws_secret_access_key="s3cr3t-value",
            region="eu-west-1",
        ),
    )
    assert fsspec.config.conf["s3"] == {
        "endpoint_url": "http://127.0.0.1:9",
        "key": "AKIAHONING",
        "secret": "s3cr3t-value",
        "client_kwargs": {"region_name": "eu-west-1"},
    }
    assert (
        honing.storage.redact_secrets("denied for AKIAHONING / s3cr3t-value at 127.0.0.1:9")
        == "denied for *** / *** at 127.0.0.1:9"
    )
    honing.storage.set_storage_options("s3")
    assert "s3" not in fsspec.config.conf


# --- a real S3 server ------------------------------------------------------------------------
def test_an_s3_save_folder_gets_complete_checkpoints_and_resumes_bit_identically(s3, tmp_path):
    reference = make_trainer(tmp_path / "local", max_duration="12steps")
    reference.fit()

    saved = SavedSizes()
    first = fast(make_trainer(s3.url, max_duration="12steps", hard_stop="8steps", callbacks={"sizes": saved}))
    first.fit()
    assert first.work_folder == work_folder_for(s3.url) and first.work_folder.startswith(str(tmp_path / "cache"))
    remote = remote_steps(s3.keys())
    assert sorted(remote) == ["step4", "step8"]
    assert remote["step4"] == saved.sizes["step4"] and remote["step8"] == saved.sizes["step8"]
    assert MARKER in remote["step8"] and "model_and_optim/.metadata" in remote["step8"]
    assert first.write_file("config.yaml", "seed: 0\n") == f"{s3.url}/config.yaml"
    hf = make_folder(os.path.join(first.work_folder, "hf"), {"config.json": b"{}", "model.safetensors": b"w" * 64})
    assert first.persist_working_file(hf) == f"{s3.url}/hf"
    assert first.checkpointer.wait_for_uploads(10)
    assert s3.keys()["config.yaml"] == 8
    assert remote_steps(s3.keys())["hf"] == {"config.json": 2, "model.safetensors": 64, MARKER: 2}

    shutil.rmtree(first.work_folder)  # the second run can only read S3
    second = fast(make_trainer(s3.url, max_duration="12steps", callbacks={"sizes": saved}))
    second.fit()
    assert second.global_step == 12
    assert torch.equal(flat_weights(second), flat_weights(reference))
    assert remote_steps(s3.keys())["step12"] == saved.sizes["step12"]


def test_a_load_path_on_s3_is_loaded_with_load_strategy_always(s3, tmp_path):
    reference = make_trainer(tmp_path / "local", max_duration="12steps")
    reference.fit()
    fast(make_trainer(s3.url, max_duration="12steps", hard_stop="8steps")).fit()

    for name, load_path in (("folder", s3.url), ("step4", f"{s3.url}/step4")):
        resumed = make_trainer(tmp_path / name, max_duration="12steps", load_path=load_path, load_strategy="always")
        resumed.fit()
        assert resumed.global_step == 12
        if load_path == s3.url:  # its newest checkpoint, step8
            assert torch.equal(flat_weights(resumed), flat_weights(reference))
    with pytest.raises(CheckpointError, match=f"no loadable checkpoint was found in .* or '{s3.url}/nothing'"):
        make_trainer(tmp_path / "none", load_path=f"{s3.url}/nothing", load_strategy="always").fit()


def test_without_an_uploader_a_checkpoint_is_written_to_s3_directly(s3, tmp_path):
    trained = make_trainer(tmp_path / "trained", max_duration="4steps")
    trained.fit()
    Checkpointer().save(f"{s3.url}/step4", trained.train_module, {"global_step": 4})
    assert Checkpointer.find_checkpoints(s3.url) == [(4, f"{s3.url}/step4")]
    assert sorted(remote_steps(s3.keys())) == ["step4"]  # the temporary step4.tmp is gone
    fresh = make_trainer(tmp_path / "fresh", init_seed=1)
    assert not torch.equal(flat_weights(fresh), flat_weights(trained))
    assert Checkpointer().load(f"{s3.url}/step4", fresh.train_module) == {"global_step": 4}
    assert torch.equal(flat_weights(fresh), flat_weights(trained))


@pytest.mark.slow
def test_the_storage_going_down_mid_upload_delays_but_never_corrupts_checkpoints(s3, s3_proxy, monkeypatch, caplog):
    secret = "proxy-secret-0123456789"
    monkeypatch.setitem(fsspec.config.conf, "s3", {})
    honing.storage.set_storage_options(
        "s3",
        **honing.storage.s3_storage_options(
            endpoint_url=s3_proxy.endpoint, aws_access_key_id="AKIAPROXY", aws_secret_access_key=secret
        ),
    )
    cut = threading.Event()
    put_file = Uploader._put_file

    def cut_after_first_step6_file(self, fs, source, target):
        put_file(self, fs, source, target)
        if "/step6/" in target and not cut.is_set():
            s3_proxy.down()  # the storage becomes unreachable halfway through step6's upload
            cut.set()

    monkeypatch.setattr(Uploader, "_put_file", cut_after_first_step6_file)
    saved = SavedSizes()
    seen = {}

    def during_the_outage(trainer):
        assert cut.wait(20)
        wait_until(lambda: any("cannot upload" in r.getMessage() for r in caplog.records))
        keys = s3.keys()
        seen["step6"] = remote_steps(keys).get("step6", {})
        assert_marked_means_whole(keys, saved.sizes)
        seen["local"] = sorted(os.listdir(trainer.work_folder))
        seen["confirmed"] = [step for step, _ in trainer.checkpointer.confirmed_checkpoints(trainer.save_folder)]
        s3_proxy.up()

    trainer = fast(
        make_trainer(
            s3.url,
            max_duration="12steps",
            save_interval=2,
            callbacks={"sizes": saved, "outage": AtStep(10, during_the_outage)},
        )
    )
    with caplog.at_level(logging.INFO):
        trainer.fit()

    assert 0 < len(seen["step6"]) < len(saved.sizes["step6"]) and MARKER not in seen["step6"]
    assert seen["confirmed"] == [2, 4]
    assert {"step6", "step8"} <= set(seen["local"])  # kept locally while training went on
    remote = remote_steps(s3.keys())
    assert sorted(remote) == [f"step{n}" for n in (10, 12, 2, 4, 6, 8)]
    assert all(remote[name] == saved.sizes[name] for name in remote)  # every checkpoint arrived whole
    messages = [r.getMessage() for r in caplog.records if r.name == "honing.train.remote"]
    assert sum(m.startswith("cannot upload to s3://honing-tests") for m in messages) == 1
    assert sum(m.startswith("uploads to s3://honing-tests work again") for m in messages) == 1
    assert secret not in caplog.text


@pytest.mark.slow
def test_keep_last_keeps_local_copies_until_their_upload_is_confirmed(s3, s3_proxy, monkeypatch):
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": s3_proxy.endpoint})
    url, seen = s3.url, {}

    def storage_down_after_step2(trainer):
        wait_until(lambda: trainer.checkpointer.uploader.is_confirmed(f"{url}/step2"))
        s3_proxy.down()

    def storage_back(trainer):
        seen["local"] = sorted(name for name in os.listdir(trainer.work_folder) if name.startswith("step"))
        seen["remote"] = sorted(remote_steps(s3.keys()))
        s3_proxy.up()

    saved = SavedSizes()
    trainer = fast(
        make_trainer(
            url,
            max_duration="10steps",
            save_interval=2,
            callbacks={
                "checkpointer": CheckpointerCallback(save_interval=2, keep_last=1, async_save=False),
                "sizes": saved,
                "down": AtStep(3, storage_down_after_step2),
                "back": AtStep(8, storage_back),
            },
        )
    )
    trainer.fit()

    # keep_last=1 would have removed step4 when step6 was saved, but step4 was never uploaded
    assert seen["local"] == ["step2", "step4", "step6"] and seen["remote"] == ["step2"]
    remote = remote_steps(s3.keys())
    assert "step10" in remote and all(remote[name] == saved.sizes[name] for name in remote)
    local = sorted(name for name in os.listdir(trainer.work_folder) if name.startswith("step"))
    assert set(local) <= set(remote)  # what is left locally is uploaded
