"""The model presets under ``configs/models/``: each names the budget it was sized for in its first line
(``# budget: 24GiB nproc: 1``), and is planned with it exactly as ``honing plan PRESET --budget 24GiB --nproc 1``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from honing.errors import ConfigError
from honing.plan.estimate import MemoryEstimate, parse_bytes

PRESETS_FOLDER = Path(__file__).resolve().parents[2] / "configs" / "models"
BUDGET_LINE = re.compile(r"#\s*budget:\s*(?P<budget>\S+)\s+nproc:\s*(?P<nproc>\d+)\s*$")


@dataclass(frozen=True)
class Budget:
    """The memory per GPU and the number of GPUs a preset is sized for."""

    text: str  # as written: 24GiB
    bytes: int
    nproc: int


@dataclass(frozen=True)
class PlannedPreset:
    """A preset, its budget and ``honing plan``'s report and estimate for it."""

    path: Path
    budget: Budget
    report: str
    estimate: MemoryEstimate


def preset_paths(folder: Path = PRESETS_FOLDER) -> list[Path]:
    """Every preset under ``folder``, in path order."""
    return sorted(folder.rglob("*.yaml"))


def preset_budget(path: Path) -> Budget:
    """The budget a preset's first line names (``# budget: 24GiB nproc: 1``)."""
    first = path.read_text().split("\n", 1)[0]
    match = BUDGET_LINE.fullmatch(first.strip())
    if match is None:
        raise ConfigError(f"{path}:1: expected the preset's budget, e.g. '# budget: 24GiB nproc: 1', got {first!r}")
    return Budget(match["budget"], parse_bytes(match["budget"]), int(match["nproc"]))


def plan_preset(path: Path) -> PlannedPreset:
    """``honing plan PATH --budget B --nproc N`` with the preset's own budget: the same loading and planning."""
    from honing.interop.configs.loading import load_any_config
    from honing.plan.from_config import plan_config

    budget = preset_budget(path)
    report, result = plan_config(load_any_config(str(path), []), budget=budget.bytes, nproc=budget.nproc)
    return PlannedPreset(path, budget, report, result)
