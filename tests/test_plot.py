"""``honing.plot``: reading metrics.jsonl (last line wins) and the PNG it draws."""

from __future__ import annotations

import json
import logging
import math
import os

import matplotlib.image
import pytest

from honing.errors import DataError
from honing.plot import plot_runs, read_metrics, series, smoothed

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def write_run(folder, rows, *, tail=""):
    """A run folder whose metrics.jsonl holds ``rows`` (and ``tail`` appended raw)."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "metrics.jsonl"), "w") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in rows)
        handle.write(tail)
    return str(folder)


def training_rows(steps=20, scale=1.0):
    """Plausible metrics of a run: loss falls, lr warms up, every 5th step has an eval loss."""
    rows = []
    for step in range(1, steps + 1):
        row = {
            "step": step,
            "train/loss": scale * 4.0 / step,
            "optim/lr": min(step, 4) * 1e-3,
            "optim/grad_norm": 1.0 + 1.0 / step,
            "throughput/tokens_per_s": 1000.0 + step,
            "throughput/total_tokens": 64 * step,
        }
        if step % 5 == 0:
            row["eval/loss"] = scale * 5.0 / step
        rows.append(row)
    return rows


def check_png(path, width=1200, height=800):
    with open(path, "rb") as handle:
        data = handle.read()
    assert data[:8] == PNG_SIGNATURE
    assert len(data) > 20_000  # four panels of axes, lines and text, not an empty canvas
    assert matplotlib.image.imread(path).shape[:2] == (height, width)


def test_the_last_line_of_a_step_wins_and_non_finite_values_are_kept(tmp_path, caplog):
    run = write_run(
        tmp_path / "run",
        [
            {"step": 1, "train/loss": 4.0},
            {"step": 2, "train/loss": 3.5},
            {"step": 2, "train/loss": 3.25, "optim/lr": 0.5},  # a resumed run logged step 2 again
            {"step": 3, "train/loss": "nan"},
        ],
        tail='{"step": 4, "train/lo',
    )  # a line cut short when the run was killed
    with caplog.at_level(logging.WARNING):
        metrics = read_metrics(run)
    assert metrics[1] == {"train/loss": 4.0}
    assert metrics[2] == {"train/loss": 3.25, "optim/lr": 0.5}
    assert math.isnan(metrics[3]["train/loss"]) and 4 not in metrics
    assert "skipped 1 unreadable line(s) (first at line 5)" in caplog.text


def test_series_by_step_or_by_tokens_skips_steps_without_the_metric(tmp_path):
    metrics = read_metrics(write_run(tmp_path / "run", training_rows(10)))
    assert series(metrics, "eval/loss", "step") == ([5.0, 10.0], [1.0, 0.5])
    assert series(metrics, "eval/loss", "tokens") == ([320.0, 640.0], [1.0, 0.5])


def test_one_run_is_drawn_into_its_own_folder(tmp_path):
    run = write_run(tmp_path / "run", training_rows())
    path = plot_runs([run])
    assert path == os.path.join(run, "plot.png")
    check_png(path)


def test_several_runs_are_drawn_into_the_working_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = write_run(tmp_path / "lr-high", training_rows())
    second = write_run(tmp_path / "lr-low", training_rows(scale=0.5))
    path = plot_runs([first, second], x="tokens")
    assert path == "plot.png"
    check_png(tmp_path / "plot.png")


def test_an_output_path_is_honoured(tmp_path):
    run = write_run(tmp_path / "run", training_rows())
    out = tmp_path / "figures" / "curves.png"
    assert plot_runs([run], str(out)) == str(out)
    check_png(out)


def test_a_folder_without_metrics_is_named(tmp_path):
    with pytest.raises(DataError, match=r"empty: no metrics\.jsonl in this folder"):
        plot_runs([str(tmp_path / "empty")])


def test_tokens_axis_needs_total_tokens(tmp_path):
    run = write_run(tmp_path / "run", [{"step": 1, "train/loss": 4.0}])
    with pytest.raises(DataError, match="throughput/total_tokens"):
        plot_runs([run], x="tokens")


def test_chosen_metrics_get_a_panel_each_and_a_typo_is_named(tmp_path):
    rows = [
        {"step": step, "train/reward": step / 10, "train/rewards/exact_answer/mean": step / 20} for step in range(1, 31)
    ]
    run = write_run(tmp_path / "grpo", rows)
    out = plot_runs(
        [run], str(tmp_path / "reward.png"), metrics=["train/reward", "train/rewards/exact_answer/mean"], smooth=5
    )
    check_png(out)
    with pytest.raises(DataError, match=r"--metric train/rewrd: no run logged it; did you mean train/reward"):
        plot_runs([run], metrics=["train/rewrd"])
    with pytest.raises(DataError, match="--smooth: expected a window of at least 1"):
        plot_runs([run], smooth=0)


def test_smoothing_is_a_trailing_mean_that_skips_nan():
    assert smoothed([1.0, 3.0, math.nan, 5.0, 7.0], 2) == [1.0, 2.0, 3.0, 5.0, 6.0]
    assert smoothed([2.0, 4.0], 1) == [2.0, 4.0]
