"""``honing plot``: draw loss, learning rate, gradient norm and throughput (or chosen metrics) of one or more runs."""

from __future__ import annotations

import difflib
import logging
import math
import os
from typing import TYPE_CHECKING

from honing.errors import DataError
from honing.json_lines import json_lines

if TYPE_CHECKING:
    from matplotlib.axes import Axes

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
    for line_number, record in json_lines(path):
        try:
            step = int(record.pop("step"))
            # non-finite values are written as strings ("nan", "inf")
            steps[step] = {key: float(value) for key, value in record.items()}
        except (ValueError, KeyError, TypeError, AttributeError):  # not JSON, or not an object with a step
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


def smoothed(values: list[float], window: int) -> list[float]:
    """The trailing mean of each value and the ``window - 1`` before it (fewer at the start; NaN is skipped)."""
    out = []
    for index in range(len(values)):
        finite = [v for v in values[max(0, index - window + 1) : index + 1] if math.isfinite(v)]
        out.append(sum(finite) / len(finite) if finite else math.nan)
    return out


def chosen_panels(runs: list[tuple[str, str, dict]], metrics: list[str]) -> list[tuple[str, list[tuple[str, str]]]]:
    """One panel per metric the user named; a name no run logged is refused with the closest logged names."""
    logged = sorted({name for _, _, steps in runs for record in steps.values() for name in record})
    for metric in metrics:
        if metric not in logged:
            close = difflib.get_close_matches(metric, logged, n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(close)}?" if close else f"; logged: {', '.join(logged)}"
            raise DataError(f"--metric {metric}: no run logged it{hint}")
    return [(metric, [(metric, "-")]) for metric in metrics]


def plot_runs(
    run_dirs: list[str],
    output: str | None = None,
    *,
    x: str = "step",
    metrics: list[str] | None = None,
    smooth: int = 1,
) -> str:
    """Draw every run's curves, overlaid, one panel per metric (default: loss, lr, grad norm, tokens/s),
    optionally as a trailing mean over ``smooth`` logged points over the faint raw line; write a PNG and return
    its path."""
    if x not in ("step", "tokens"):
        raise DataError(f"--x: expected 'step' or 'tokens', got {x!r}")
    if smooth < 1:
        raise DataError(f"--smooth: expected a window of at least 1 logged point, got {smooth}")
    runs = [(run_label(run_dir), run_dir, read_metrics(run_dir)) for run_dir in run_dirs]
    panels = chosen_panels(runs, metrics) if metrics else PANELS
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
    columns = 1 if len(panels) == 1 else 2
    axes = figure.subplots(math.ceil(len(panels) / columns), columns, squeeze=False).flatten()
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    colors = [f"C{index % 10}" for index in range(len(runs))]
    for ax, (title, panel_metrics) in zip(axes, panels):
        drawn = _draw_panel(ax, runs, colors, panel_metrics, x, smooth)
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
    ax: Axes, runs: list[tuple[str, str, dict]], colors: list[str], metrics: list[tuple[str, str]], x: str, smooth: int
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
            ys = [y if math.isfinite(y) else math.nan for y in ys]
            if smooth > 1:
                # the raw points stay visible, faint, so the smoothing hides nothing
                ax.plot(xs, ys, style, color=color, alpha=0.25, markersize=3)
                ys, name = smoothed(ys, smooth), f"{name} (mean of {smooth})"
            ax.plot(xs, ys, style, color=color, label=name, markersize=3)
            drawn += 1
    return drawn
