"""Run the installed ``honing plot`` command on run folders."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import matplotlib.image

HONING = os.path.join(os.path.dirname(sys.executable), "honing")


def honing(*args, cwd):
    return subprocess.run([HONING, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def write_run(folder, steps=12):
    os.makedirs(folder)
    with open(os.path.join(folder, "metrics.jsonl"), "w") as handle:
        for step in range(1, steps + 1):
            handle.write(
                json.dumps(
                    {
                        "step": step,
                        "train/loss": 4.0 / step,
                        "optim/lr": 1e-3,
                        "optim/grad_norm": 1.0,
                        "throughput/tokens_per_s": 500.0,
                        "throughput/total_tokens": 32 * step,
                    }
                )
                + "\n"
            )
    return str(folder)


def test_plot_one_run_then_two_runs(tmp_path):
    first, second = write_run(tmp_path / "a"), write_run(tmp_path / "b")

    result = honing("plot", first, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"wrote {os.path.join(first, 'plot.png')}"
    assert matplotlib.image.imread(os.path.join(first, "plot.png")).shape[:2] == (800, 1200)

    result = honing("plot", first, second, "-o", "both.png", "--x", "tokens", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "both.png", "rb") as handle:
        assert handle.read(8) == b"\x89PNG\r\n\x1a\n"


def test_a_folder_without_metrics_exits_2_naming_it(tmp_path):
    missing = tmp_path / "nothing-here"
    missing.mkdir()
    result = honing("plot", str(missing), cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"honing: error: {missing}: no metrics.jsonl")
    assert not (missing / "plot.png").exists()
