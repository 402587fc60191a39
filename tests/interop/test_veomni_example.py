"""examples/veomni_style.py, a script in VeOmni's style and names (a ``BaseTrainer`` subclass with an extended
arguments section, ``freeze_vit`` read from ``self.args.train``, an overridden ``forward_backward_step``,
``trainer.add_callback(MyCallback(trainer))`` seeing ``micro_batches`` as a list), runs from the command line (the
script itself, and ``honing train`` of its YAML naming the recipe) and from Python."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "veomni_style.py"
CONFIG = REPO / "examples" / "veomni_style.yaml"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "HONING_CACHE_DIR": str(cwd / "cache"),
        "OMP_NUM_THREADS": "1",
    }
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def first_loss(save_folder: Path) -> float:
    rows = [json.loads(line) for line in (save_folder / "metrics.jsonl").read_text().splitlines()]
    return next(row["train/loss"] for row in rows if row.get("step") == 1 and "train/loss" in row)


@pytest.mark.slow
def test_the_veomni_style_script_runs_from_the_cli_and_from_python(tmp_path, monkeypatch):
    # the script from the command line: VeOmni's parse_args reads the YAML (with its train section) and overrides
    cli = tmp_path / "cli"
    done = run(str(SCRIPT), str(CONFIG), f"trainer.save_folder={cli}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Step 2: Custom action executed." in done.stdout and "Step 4: Custom action executed." in done.stdout
    seen = json.loads((cli / "my_callback.json").read_text())
    assert seen["micro_batches"] == [{"type": "list", "rows": [2, 2]}] * 4  # 4 rows a step, micro-batches of 2
    assert seen["loss_dict_keys"] == [["ce_loss", "weighted_loss"]] * 4  # the overridden forward_backward_step ran
    summary = json.loads((cli / "summary.json").read_text())
    assert summary == {"step": 4, "freeze_vit": True, "vision_trainable": 0, "vision_unchanged": True}
    assert "freeze_vit: true" in (cli / "config.yaml").read_text()

    # honing train of the same YAML naming the recipe: its section accepted, a typo in it refused
    honing = tmp_path / "honing"
    recipe = "recipe=examples.veomni_style:VLMTrainer"
    done = run("-m", "honing", "train", str(CONFIG), recipe, f"trainer.save_folder={honing}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert first_loss(honing) == first_loss(cli)
    typo = run("-m", "honing", "train", str(CONFIG), recipe, "train.freeze_vti=true", cwd=tmp_path)
    assert typo.returncode == 2 and "train.freeze_vti: unknown key; did you mean train.freeze_vit?" in typo.stderr

    # from Python: main() with overrides; the vision tower trains when freeze_vit is false
    spec = importlib.util.spec_from_file_location("veomni_style", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, script)  # its dataclasses read their annotations from their module
    spec.loader.exec_module(script)
    python = tmp_path / "python"
    overrides = ["train.freeze_vit=false", "train.loss_weight=1.0", f"data.cache_dir={tmp_path / 'cache'}"]
    trainer = script.main([str(CONFIG), f"trainer.save_folder={python}", *overrides])
    assert isinstance(trainer, script.VLMTrainer) and trainer.args.train.freeze_vit is False
    summary = json.loads((python / "summary.json").read_text())
    assert summary["vision_trainable"] > 0 and not summary["vision_unchanged"]
    # the override weights the loss by train.loss_weight: the first step's (same weights) is exactly half at 0.5
    assert first_loss(cli) == 0.5 * first_loss(python)
