"""``honing plot``: draw loss, learning rate, gradient norm and throughput of one or more runs."""

from __future__ import annotations

import json
import logging
import math
import os
from typing import Any

from honing.errors import DataError

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
TOKENS_METRIC = "throughput/total_tokens"
# (panel title, [(metric, line style)]); train and eval loss share a panel so they can be compared
PANELS: list[tuple[str, list[tuple[str, str]]]] = [
    ("loss", [("train/loss", "-"), ("eval/loss", "o--")]),
    ("optim/lr", [("optim/lr", "-")]),
    ("optim/grad_norm", [("optim/grad_norm", "-")]),
    ("throughput/tokens_per_s", [("throughput/tokens_per_s", "-")]),
]
FIGURE_INCHES = (12.0, 8.0)
DPI = 100


def read_metrics(run_dir: str) -> dict[int, dict[str, float]]:
    """The metrics of each step in ``RUN_DIR/metrics.jsonl``; when a step appears twice, the last line wins."""
    path = os.path.join(run_dir, METRICS_FILE)
    if not os.path.isfile(path):
        raise DataError(f"{run_dir}: no {METRICS_FILE} in this folder (expected the save folder of a honing run)")
    steps: dict[int, dict[str, float]] = {}
    unreadable: list[int] = []
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                step = int(record.pop("step"))
                # non-finite values are written as strings ("nan", "inf")
                steps[step] = {key: float(value) for key, value in record.items()}
            except (ValueError, KeyError, TypeError, AttributeError):
                unreadable.append(line_number)  # e.g. a line cut short when a run was killed
    if unreadable:
        log.warning(
            "%s: skipped %d unreadable line(s) (first at line %d); expected one JSON object with a 'step' per line",
            path,
            len(unreadable),
            unreadable[0],
        )
    return steps


def series(steps: dict[int, dict[str, float]], metric: str, x: str) -> tuple[list[float], list[float]]:
    """The (x, y) points of ``metric`` in step order; ``x`` is ``step`` or ``tokens`` (steps without it are
    left out)."""
    xs: list[float] = []
    ys: list[float] = []
    for step in sorted(steps):
        record = steps[step]
        if metric not in record:
            continue
        position = float(step) if x == "step" else record.get(TOKENS_METRIC)
        if position is None:
            continue
        xs.append(position)
        ys.append(record[metric])
    return xs, ys


def default_output(run_dirs: list[str]) -> str:
    """``RUN_DIR/plot.png`` for one run, ``plot.png`` in the working folder for several."""
    return os.path.join(run_dirs[0], "plot.png") if len(run_dirs) == 1 else "plot.png"


def run_label(run_dir: str) -> str:
    """A run's name in the legend: its folder's name."""
    return os.path.basename(os.path.normpath(run_dir))


def plot_runs(run_dirs: list[str], output: str | None = None, *, x: str = "step") -> str:
    """Draw every run's curves, overlaid, in a 2x2 grid of panels; write a PNG and return its path."""
    if x not in ("step", "tokens"):
        raise DataError(f"--x: expected 'step' or 'tokens', got {x!r}")
    runs = [(run_label(run_dir), run_dir, read_metrics(run_dir)) for run_dir in run_dirs]
    if x == "tokens":
        for _, run_dir, steps in runs:
            if steps and not any(TOKENS_METRIC in record for record in steps.values()):
                raise DataError(
                    f"{os.path.join(run_dir, METRICS_FILE)}: --x tokens needs '{TOKENS_METRIC}' "
                    f"(recorded by callbacks.speed_monitor), which this run did not log"
                )
    output = output or default_output(run_dirs)

    # the object API with the Agg canvas: no GUI backend, and no global pyplot state to leak
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=FIGURE_INCHES, dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(2, 2).flatten()
    colors = [f"C{index % 10}" for index in range(len(runs))]
    for ax, (title, metrics) in zip(axes, PANELS):
        drawn = _draw_panel(ax, runs, colors, metrics, x)
        ax.set_title(title)
        ax.set_xlabel("tokens" if x == "tokens" else "step")
        ax.grid(True, alpha=0.3)
        if drawn:
            ax.legend(fontsize="small")
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="gray")
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    figure.savefig(output, format="png")
    return output


def _draw_panel(
    ax: Any, runs: list[tuple[str, str, dict]], colors: list[str], metrics: list[tuple[str, str]], x: str
) -> int:
    """Draw each run's lines for ``metrics`` on ``ax``; returns how many lines were drawn."""
    drawn = 0
    for (label, _, steps), color in zip(runs, colors):
        for metric, style in metrics:
            xs, ys = series(steps, metric, x)
            if not xs:
                continue
            # name the metric in the legend only where a panel holds more than one
            name = label if len(metrics) == 1 else f"{label} {metric}"
            ax.plot(xs, [y if math.isfinite(y) else math.nan for y in ys], style, color=color, label=name, markersize=3)
            drawn += 1
    return drawn
