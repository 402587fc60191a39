"""Start real ``honing train`` runs (one process or several under torchrun) for the multi-process tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[2]

# A tiny Llama without dropout: runs that see the same global batches compute the same losses,
# however the batch is split over processes and micro-batches.
CONFIG = """
method: pretrain
trainer:
  save_folder: {save_folder}
  max_duration: {steps}steps
  num_threads: 1
  metrics_collect_interval: 1
  cancel_check_interval: 1
data:
  train:
    sources: [{{path: "{{stdlib}}/json/*.py"}}]
  seq_len: 32
  global_batch_size: 8
  micro_batch_size: 2
tokenizer: {{kind: byte}}
model:
  config: {{model_type: llama, hidden_size: 32, num_hidden_layers: 2, num_attention_heads: 2,
           num_key_value_heads: 2, intermediate_size: 64}}
optim: {{lr: 1.0e-2}}
scheduler: {{name: cosine, warmup_steps: 2}}
callbacks:
  checkpointer: {{save_interval: {save_interval}, async_save: true}}
  evaluator: {{enabled: false}}
  speed_monitor: {{enabled: false}}
  sample: {{prompts: ["def "], max_new_tokens: 4}}
  console: {{plain: true}}
  custom: {custom}
"""


def dumping_recipe(tmp_path: Path, monkeypatch: Any, module: str, source: str) -> None:
    """A test's recipe (``source``, importable as ``module``) and the never-flat reward ``varied_reward`` written to
    ``tmp_path``, which the runs import from (PYTHONPATH) and dump their records to (DUMP_DIR)."""
    from tests.recipes.test_grpo_estimators import FLAT_REWARD

    (tmp_path / f"{module}.py").write_text(source)
    (tmp_path / "varied_reward.py").write_text(FLAT_REWARD.format(modulus=1))  # never flat: sum(ord) % 7
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("DUMP_DIR", str(tmp_path))


def write_config(
    tmp_path: Path, name: str, *, steps: int = 10, save_interval: int = 5, custom: list[dict] | None = None
) -> tuple[str, Path]:
    """A config file for a run saving to ``tmp_path/name``; returns its path and the save folder."""
    save_folder = tmp_path / name
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        CONFIG.format(
            save_folder=save_folder, steps=steps, save_interval=save_interval, custom=json.dumps(custom or [])
        )
    )
    return str(path), save_folder


def honing_train(
    config: str, *overrides: str, nproc: int | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """``honing train CONFIG [--nproc N] OVERRIDES`` in a subprocess, one thread per process."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    nproc_args = ["--nproc", str(nproc)] if nproc else []
    return subprocess.run(
        [sys.executable, "-m", "honing", "train", config, *nproc_args, *overrides],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=timeout,
    )


def failure_excerpt(stderr: str, lines: int = 40, tail: int = 3000) -> str:
    """What a failed multi-process run's stderr says first and last: the lines from the first ``Fatal Python error``
    (a rank that aborted) or ``Traceback``, then the tail, so a crash's first line is never cut away."""
    text = stderr.splitlines()
    first = next((i for i, line in enumerate(text) if "Fatal Python error" in line), None)
    if first is None:
        first = next((i for i, line in enumerate(text) if line.startswith("Traceback")), None)
    head = "\n".join(text[first : first + lines]) + "\n[...]\n" if first is not None else ""
    return head + stderr[-tail:]


def metrics(save_folder: Path) -> dict[int, dict[str, float]]:
    """The run's logged metrics by step (a step logged twice, e.g. by a resumed run, keeps the last)."""
    rows = [json.loads(line) for line in (save_folder / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: row for row in rows}


def weights(path: Path) -> dict[str, torch.Tensor]:
    """A full state dict written by ``DumpWeights``."""
    return torch.load(path, weights_only=True)


def assert_same_weights(left: dict[str, torch.Tensor], right: dict[str, torch.Tensor]) -> None:
    """Bit-equal tensors under the same names."""
    assert sorted(left) == sorted(right)
    different = [name for name in left if not torch.equal(left[name], right[name])]
    assert not different, f"weights differ: {different}"
