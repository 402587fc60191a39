"""CheckpointUploadCallback: every checkpoint and the final exports copied whole to a local folder or S3,
and keep_last holding local checkpoints back until they are copied."""

from __future__ import annotations

import os

import fsspec.config
import pytest

import honing.storage
from honing.config.schema import StorageSection
from honing.train.callbacks.base import Callback
from honing.train.callbacks.checkpointer import CheckpointerCallback
from honing.train.callbacks.upload import CheckpointUploadCallback
from honing.train.checkpoint import MARKER
from tests.helpers import make_trainer as make_run

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


class FakeExport(Callback):
    """Writes ``SAVE_FOLDER/hf`` at train end, where the real export callback runs (priority -60)."""

    priority = -60

    def on_train_end(self) -> None:
        folder = os.path.join(self.trainer.save_folder, "hf")
        os.makedirs(folder)
        for name, data in {"config.json": b"{}", "model.safetensors": b"w" * 100}.items():
            with open(os.path.join(folder, name), "wb") as handle:
                handle.write(data)


class AtStep(Callback):
    """Runs ``action()`` at the end of ``step``, before that step's checkpoint is saved."""

    def __init__(self, step: int, action):
        self.at, self.action = step, action

    def on_step_end(self) -> None:
        if self.step == self.at:
            self.action()


def steps(folder: str) -> list[str]:
    return sorted((n for n in os.listdir(folder) if n.startswith("step")), key=lambda n: int(n[4:]))


def test_every_checkpoint_and_the_export_are_copied_whole_to_a_local_folder(tmp_path):
    run, copy = tmp_path / "run", tmp_path / "copy"
    upload = CheckpointUploadCallback(str(copy), storage=StorageSection(retry_initial_seconds=0.01))
    trainer = make_run(run, max_duration="10steps", callbacks={"upload": upload, "export": FakeExport()})
    trainer.fit()
    assert upload.uploader.pending == []  # fit waited for the copies
    assert steps(copy) == ["step4", "step8", "step10"] and sorted(os.listdir(copy)) == [
        "hf",
        "step10",
        "step4",
        "step8",
    ]  # best/ does not exist, so it is not copied
    for name in ("step4", "step8", "step10"):
        assert honing.storage.file_sizes(str(copy / name)) == honing.storage.file_sizes(str(run / name))
    assert honing.storage.file_sizes(str(copy / "hf")) == {"config.json": 2, "model.safetensors": 100, MARKER: 2}


def test_checkpoints_are_copied_to_s3(s3, tmp_path):
    run = tmp_path / "run"
    upload = CheckpointUploadCallback(f"{s3.url}/copy", storage=StorageSection(retry_initial_seconds=0.01))
    make_run(run, max_duration="8steps", callbacks={"upload": upload}).fit()
    keys = s3.keys("copy")
    for name in ("step4", "step8"):
        local = honing.storage.file_sizes(str(run / name))
        assert {key[len(name) + 1 :]: size for key, size in keys.items() if key.startswith(f"{name}/")} == local
    assert len(keys) == 2 * len(honing.storage.file_sizes(str(run / "step4")))


@pytest.mark.slow
def test_keep_last_holds_local_checkpoints_until_they_are_copied(s3, s3_proxy, tmp_path, monkeypatch):
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": s3_proxy.endpoint})
    s3_proxy.down()  # the destination is unreachable from the start
    run, seen = tmp_path / "run", {}

    def storage_back():
        seen["local"] = steps(run)
        seen["copied"] = sorted(s3.keys("copy"))
        s3_proxy.up()

    upload = CheckpointUploadCallback(
        f"{s3.url}/copy", storage=StorageSection(retry_initial_seconds=0.01, retry_max_seconds=0.1)
    )
    trainer = make_run(
        run,
        max_duration="10steps",
        callbacks={
            "checkpointer": CheckpointerCallback(save_interval=2, keep_last=1, async_save=False),
            "upload": upload,
            "back": AtStep(8, storage_back),
        },
    )
    trainer.fit()

    # keep_last=1 would have kept only step6, but nothing had been copied yet
    assert seen == {"local": ["step2", "step4", "step6"], "copied": []}
    assert steps(run) == ["step10"]  # the held ones went once copied
    copied = s3.keys("copy")
    for n in (2, 4, 6, 8, 10):
        assert f"step{n}/{MARKER}" in copied
    assert copied["step10/train/rank0.pt"] == os.path.getsize(run / "step10" / "train" / "rank0.pt")
