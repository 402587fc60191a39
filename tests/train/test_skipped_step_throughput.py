"""A step skipped with ``steps_to_skip`` consumes its batch in microseconds without training on it: it once logged
millions of tokens/s, an MFU above 1, and the speed monitor then stopped recording MFU for the rest of the run. A
resumed run with skipped steps keeps recording MFU, and the skipped steps log 0 tokens/s (no token trained on)."""

from __future__ import annotations

import pytest

from honing.train.callbacks import speed_monitor
from honing.train.callbacks.base import Callback
from honing.train.callbacks.speed_monitor import SpeedMonitorCallback
from honing.train.common import StepSkipRange
from tests.helpers import make_trainer

SEQ_LEN, ROWS_PER_STEP = 16, 8  # TokenDataset's rows, make_trainer's global batch


class Logged(Callback):
    """Every step's logged metrics."""

    def __init__(self):
        self.steps: dict[int, dict[str, float]] = {}

    def on_log(self, step: int, metrics: dict[str, float]) -> None:
        self.steps[step] = metrics


def run(folder, steps: int, logged: Logged, peak: float, **kwargs):
    monitor = SpeedMonitorCallback(seq_len=SEQ_LEN, peak_flops=peak)
    trainer = make_trainer(
        folder,
        max_duration=f"{steps}steps",
        save_interval=4,
        dropout=0.0,
        callbacks={"speed_monitor": monitor, "logged": logged},
        **kwargs,
    )
    trainer.fit()
    return trainer, monitor


def test_a_resumed_run_with_skipped_steps_keeps_recording_mfu(tmp_path, caplog):
    flops_per_token = make_trainer(tmp_path / "probe").train_module.num_flops_per_token(SEQ_LEN)
    # a peak at which a trained step's MFU is far below 1 (a few thousand tokens/s here), while a skipped step
    # timed as if it trained its batch (millions of tokens/s) would come out above 1
    peak = flops_per_token * 2e6
    run(tmp_path / "run", 4, Logged(), peak)

    logged = Logged()
    with caplog.at_level("WARNING", logger=speed_monitor.__name__):
        trainer, monitor = run(tmp_path / "run", 9, logged, peak, steps_to_skip=[StepSkipRange(5, 7)])
    assert trainer.checkpoint_loaded and sorted(logged.steps) == [5, 6, 7, 8, 9]
    assert "no longer recorded" not in caplog.text and monitor.peak == peak
    for step in (5, 6):  # skipped: the batch is consumed (its tokens count), nothing is trained on
        metrics = logged.steps[step]
        assert metrics["throughput/tokens_per_s"] == 0.0 and metrics["throughput/mfu"] == 0.0
        assert metrics["throughput/total_tokens"] == step * ROWS_PER_STEP * SEQ_LEN
    for step in (7, 8, 9):  # trained again: measured as any step, MFU still recorded
        metrics = logged.steps[step]
        assert 0 < metrics["throughput/tokens_per_s"] < 1e6
        assert 0 < metrics["throughput/mfu"] < 0.5
        assert metrics["throughput/mfu"] == pytest.approx(
            flops_per_token * metrics["throughput/tokens_per_s"] / peak, rel=1e-5
        )
    # the running average counts trained steps only (warm-up: the first two after the resume)
    assert all("throughput/avg_tokens_per_s" not in logged.steps[step] for step in (5, 6, 7, 8))
    assert logged.steps[9]["throughput/avg_tokens_per_s"] == pytest.approx(
        logged.steps[9]["throughput/tokens_per_s"], rel=1e-5
    )
