"""examples/olmo_core_style.py, a script in OLMo-core's style and names, runs from the command line (canceled, then
resumed) and from Python (uninterrupted), and both give the same losses, step for step."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "olmo_core_style.py"


def losses(save_folder: Path) -> dict[int, float]:
    """The script's losses.jsonl, persisted from its work folder to the save folder."""
    rows = [json.loads(line) for line in (save_folder / "losses.jsonl").read_text().splitlines()]
    return {row["step"]: row["loss"] for row in rows}


def run_script(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "HONING_CACHE_DIR": str(cwd / "cache"),
        "OMP_NUM_THREADS": "1",
    }
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_the_olmo_core_style_script_runs_from_the_cli_and_from_python(tmp_path):
    cli = tmp_path / "cli"
    first = run_script(str(cli), "--steps", "6", "--cancel-at", "3", "--work-dir", str(tmp_path / "work"), cwd=tmp_path)
    # canceled after step 3: the checkpointer the trainer adds by default saved it, and it was read back
    assert json.loads((cli / "summary.json").read_text()) == {"step": 3, "canceled": True, "tokens": 3 * 8 * 32}
    assert f"{cli / 'step3'}: step 3, canceled: True" in first.stdout
    assert sorted(losses(cli)) == [1, 2, 3] and not (cli / "step6").exists()
    run_script(str(cli), "--steps", "6", cwd=tmp_path)  # resumes from step 3
    assert json.loads((cli / "summary.json").read_text())["step"] == 6 and (cli / "step6").is_dir()

    spec = importlib.util.spec_from_file_location("olmo_core_style", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    trainer = script.main(str(tmp_path / "python"), steps=6)
    assert trainer.global_step == 6 and not trainer.is_canceled
    assert losses(tmp_path / "python") == losses(cli)  # canceled and resumed == uninterrupted, bit for bit
