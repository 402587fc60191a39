"""W&B offline through the real Trainer: the run's history, the key kept out, resume, failures."""

from __future__ import annotations

import glob
import json
import logging
import os
import struct
import time

import pytest
import wandb
from wandb.proto import wandb_internal_pb2

from honing.train.callbacks.wandb import WandbCallback
from tests.helpers import make_trainer as make_run

API_KEY = "k3y" * 13 + "x"  # 40 characters, like a real key
BLOCK = 32768  # the .wandb file is a LevelDB-style log of 32 KiB blocks


@pytest.fixture(autouse=True)
def offline_wandb(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-env"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)


def wandb_records(path):
    """Every protobuf Record in a ``run-ID.wandb`` file (wandb 0.2x no longer ships a Python reader)."""
    data = open(path, "rb").read()
    assert data[:4] == b":W&B"
    position, chunks = 7, b""  # header: ident, magic, version
    while position + 7 <= len(data):
        if BLOCK - position % BLOCK < 7:  # a block's tail too short for a record header is padding
            position += BLOCK - position % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        chunks += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # FULL, or LAST of a split record
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunks)
            chunks = b""
            yield record


def offline_runs(save_folder):
    return sorted(glob.glob(os.path.join(save_folder, "wandb", "offline-run-*", "run-*.wandb")))


def history(path, settle_seconds=30.0):
    """{step: {metric: value}} as the offline run recorded it. wandb-core writes the file from its own process
    and, on a loaded machine, can still be writing after ``finish()`` returns: read until two reads agree."""
    deadline, previous = time.monotonic() + settle_seconds, None
    while True:
        try:
            current = _history_once(path)
        except Exception:  # noqa: BLE001 - a record half-written by wandb-core: read again
            if time.monotonic() > deadline:
                raise
            current = None
        if (current and current == previous) or time.monotonic() > deadline:
            return current
        previous = current
        time.sleep(0.5)


def _history_once(path):
    out = {}
    for record in wandb_records(path):
        if record.WhichOneof("record_type") == "history":
            out[record.history.step.num] = {
                item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item
            }
    return out


def run_record(path):
    return next(r.run for r in wandb_records(path) if r.WhichOneof("record_type") == "run")


def jsonl(save_folder):
    with open(os.path.join(save_folder, "metrics.jsonl")) as handle:
        return {row["step"]: row for row in map(json.loads, handle)}


def test_offline_run_holds_every_logged_metric_and_never_the_key(tmp_path):
    save = tmp_path / "run"
    config = {"run_name": "tiny", "callbacks": {"wandb": {"api_key": API_KEY, "project": "p"}}}
    callback = WandbCallback(project="p", name="tiny", tags=["test"], mode="offline", api_key=API_KEY, config=config)
    make_run(save, max_duration="6steps", callbacks={"wandb": callback}).fit()

    [path] = offline_runs(save)
    logged = history(path)
    expected = jsonl(save)
    assert sorted(logged) == [1, 2, 3, 4, 5, 6]
    assert [logged[s]["train/loss"] for s in range(1, 7)] == [expected[s]["train/loss"] for s in range(1, 7)]
    assert [logged[s]["optim/lr"] for s in range(1, 7)] == [expected[s]["optim/lr"] for s in range(1, 7)]
    run = run_record(path)
    assert (run.run_id, run.display_name, list(run.tags)) == (callback.run_id, "tiny", ["test"])
    sent_config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert sent_config["callbacks"] == {"wandb": {"api_key": "***", "project": "p"}}
    # the key reached wandb only through the environment, and only while it started
    assert "WANDB_API_KEY" not in os.environ
    for folder, _, files in os.walk(save):
        for name in files:
            with open(os.path.join(folder, name), "rb") as handle:
                assert API_KEY.encode() not in handle.read(), os.path.join(folder, name)


def test_a_resumed_run_continues_the_same_wandb_run(tmp_path):
    save = tmp_path / "run"
    first = WandbCallback(mode="offline")
    make_run(save, max_duration="4steps", save_interval=4, callbacks={"wandb": first}).fit()
    second = WandbCallback(mode="offline")
    make_run(save, max_duration="6steps", save_interval=4, callbacks={"wandb": second}).fit()

    assert second.run_id == first.run_id and len(first.run_id) == 16
    paths = offline_runs(save)
    assert len(paths) == 2 and all(p.endswith(f"run-{first.run_id}.wandb") for p in paths)
    steps = sorted(sorted(history(p)) for p in paths)
    assert steps == [[1, 2, 3, 4], [5, 6]]


def test_an_init_failure_warns_once_and_training_goes_on(tmp_path, monkeypatch, caplog):
    def broken_init(**kwargs):
        raise ValueError(f"API key {os.environ['WANDB_API_KEY']} is not valid")

    monkeypatch.setattr(wandb, "init", broken_init)
    callback = WandbCallback(mode="online", api_key=API_KEY)
    with caplog.at_level(logging.WARNING):
        make_run(tmp_path / "run", max_duration="6steps", callbacks={"wandb": callback}).fit()

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].startswith("wandb start failed (ValueError: API key *** is not valid)")
    assert API_KEY not in caplog.text
    assert callback.active is False
    assert sorted(jsonl(tmp_path / "run")) == [1, 2, 3, 4, 5, 6]


class FlakyRun:
    """A wandb run whose ``log`` fails, as when the network drops mid-run."""

    def __init__(self):
        self.logged, self.finished = [], []

    def log(self, metrics, step):
        self.logged.append(step)
        raise ConnectionError("network is unreachable")

    def finish(self, exit_code=0):
        self.finished.append(exit_code)


def test_a_logging_failure_warns_once_not_every_step(tmp_path, monkeypatch, caplog):
    run = FlakyRun()
    monkeypatch.setattr(wandb, "init", lambda **kwargs: run)
    with caplog.at_level(logging.WARNING):
        make_run(tmp_path / "run", max_duration="6steps", callbacks={"wandb": WandbCallback()}).fit()

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "wandb logging failed (ConnectionError: network is unreachable)" in warnings[0]
    assert run.logged == [1]  # switched off after the first failure
    assert run.finished == [1]  # the half-open run is closed as failed
    assert sorted(jsonl(tmp_path / "run")) == [1, 2, 3, 4, 5, 6]


def test_a_missing_wandb_package_warns_once(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(__import__("sys").modules, "wandb", None)  # import wandb now raises ImportError
    with caplog.at_level(logging.WARNING):
        make_run(tmp_path / "run", max_duration="2steps", callbacks={"wandb": WandbCallback()}).fit()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith("wandb start failed (ModuleNotFoundError")
    assert sorted(jsonl(tmp_path / "run")) == [1, 2]


def test_state_dict_round_trips_the_run_id():
    callback = WandbCallback()
    assert callback.state_dict() == {}
    callback.load_state_dict({"run_id": "abc123"})
    assert callback.state_dict() == {"run_id": "abc123"}


def test_samples_become_a_table_at_their_step(tmp_path):
    from honing.train.callbacks.sample import TextSampleCallback

    save = tmp_path / "run"
    sample = TextSampleCallback(lambda prompt: prompt.upper(), prompts=["abc"], interval=2, printer=lambda text: None)
    make_run(save, max_duration="5steps", callbacks={"wandb": WandbCallback(mode="offline"), "sample": sample}).fit()

    [path] = offline_runs(save)
    logged = history(path)
    # a table is logged as its file's reference, nested under the key
    tables = {step: row["samples/samples/_type"] for step, row in logged.items() if "samples/samples/_type" in row}
    assert tables == {2: "table-file", 4: "table-file", 5: "table-file"}
    # the metrics of those steps are all there too (W&B drops rows logged behind its current step)
    assert all("train/loss" in logged[step] for step in range(1, 6))
    table_files = glob.glob(os.path.join(os.path.dirname(path), "files", "media", "table", "samples", "*.table.json"))
    contents = [json.load(open(f)) for f in table_files]
    assert len(contents) == 3
    assert all(c["columns"] == ["step", "prompt", "text"] for c in contents)
    assert sorted(c["data"][0][0] for c in contents) == [2, 4, 5] and contents[0]["data"][0][1:] == ["abc", "ABC"]
