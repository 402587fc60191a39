"""TensorBoard through the real Trainer: scalars read back equal metrics.jsonl; config text; resume; failure."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time

import numpy as np
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from honing.train.callbacks.tensorboard import TensorBoardCallback
from tests.helpers import make_trainer as make_run


def events(save_folder):
    accumulator = EventAccumulator(os.path.join(save_folder, "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


def jsonl(save_folder):
    with open(os.path.join(save_folder, "metrics.jsonl")) as handle:
        return {row["step"]: row for row in map(json.loads, handle)}


def test_scalars_equal_the_metrics_file_at_every_logged_step(tmp_path):
    save = tmp_path / "run"
    config = {"run_name": "tiny", "callbacks": {"wandb": {"api_key": "do-not-log-me"}}}
    make_run(save, max_duration="6steps", callbacks={"tensorboard": TensorBoardCallback(config=config)}).fit()

    accumulator = events(save)
    expected = jsonl(save)
    for metric in ("train/loss", "optim/lr", "optim/grad_norm"):
        scalars = accumulator.Scalars(metric)
        assert [s.step for s in scalars] == [1, 2, 3, 4, 5, 6]
        # TensorBoard stores scalars as float32
        assert [s.value for s in scalars] == [float(np.float32(expected[s][metric])) for s in range(1, 7)]
    [text] = accumulator.Tensors("config/text_summary")
    logged = text.tensor_proto.string_val[0].decode()
    assert all(line.startswith("    ") for line in logged.splitlines())  # a Markdown code block
    assert yaml.safe_load("\n".join(line[4:] for line in logged.splitlines())) == {
        "run_name": "tiny",
        "callbacks": {"wandb": {"api_key": "***"}},
    }


def test_a_resumed_run_replaces_the_steps_logged_after_its_checkpoint(tmp_path):
    save = tmp_path / "run"
    make_run(save, max_duration="6steps", save_interval=4, callbacks={"tensorboard": TensorBoardCallback()}).fit()
    shutil.rmtree(save / "step6")  # as if the run died after logging steps 5 and 6 but before saving them
    # TensorBoard orders event files by the whole second in their names: a resume within the same second
    # (only a test is that fast) could sort before the first run's file
    time.sleep(1.1)
    make_run(save, max_duration="8steps", save_interval=4, callbacks={"tensorboard": TensorBoardCallback()}).fit()

    steps = [s.step for s in events(save).Scalars("train/loss")]
    assert steps == [1, 2, 3, 4, 5, 6, 7, 8]  # 5 and 6 once, from the resumed run
    assert len(os.listdir(save / "tensorboard")) == 2


def test_a_writer_failure_warns_once_and_training_goes_on(tmp_path, monkeypatch, caplog):
    import torch.utils.tensorboard

    def broken_writer(**kwargs):
        raise PermissionError("read-only file system")

    monkeypatch.setattr(torch.utils.tensorboard, "SummaryWriter", broken_writer)
    callback = TensorBoardCallback()
    with caplog.at_level(logging.WARNING):
        make_run(tmp_path / "run", max_duration="4steps", callbacks={"tensorboard": callback}).fit()

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].startswith("tensorboard start failed (PermissionError: read-only file system)")
    assert sorted(jsonl(tmp_path / "run")) == [1, 2, 3, 4]


def test_samples_are_a_text_table_at_their_step(tmp_path):
    from honing.train.callbacks.sample import TextSampleCallback

    save = tmp_path / "run"
    sample = TextSampleCallback(lambda prompt: " a|b\nc", prompts=["p"], interval=2, printer=lambda text: None)
    make_run(save, max_duration="3steps", callbacks={"tensorboard": TensorBoardCallback(), "sample": sample}).fit()

    texts = events(save).Tensors("samples/samples/text_summary")
    assert [t.step for t in texts] == [2, 3]
    assert texts[0].tensor_proto.string_val[0].decode() == "| prompt | text |\n| --- | --- |\n| p |  a\\|b<br>c |"


def test_metrics_recorded_at_train_end_reach_the_tracker_before_it_closes(tmp_path):
    from honing.train import Callback

    class FinalMetric(Callback):
        """Like a canceled run's final evaluation: a metric recorded in on_train_end."""

        priority = 100

        def on_train_end(self):
            self.trainer.record_metric("final/value", 7.0)

    save = tmp_path / "run"
    callbacks = {"tensorboard": TensorBoardCallback(), "final": FinalMetric()}
    make_run(save, max_duration="3steps", callbacks=callbacks).fit()
    assert [(s.step, s.value) for s in events(save).Scalars("final/value")] == [(3, 7.0)]
    assert jsonl(save)[3]["final/value"] == 7.0
