"""Every model preset under configs/models/ plans offline (its carried shape, no hub) with the budget its first line
names, as ``honing plan PRESET --budget B --nproc N`` does, and its planned peak per GPU fits that budget."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import huggingface_hub.constants
import pytest
import yaml

from honing.plan.estimate import format_bytes
from honing.plan.presets import PRESETS_FOLDER, plan_preset, preset_budget, preset_paths

REPOSITORY = Path(__file__).resolve().parents[2]
PRESETS = preset_paths()
planned_once = functools.cache(plan_preset)  # each preset is planned once for the budget test and the docs' table


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """No hub, as on an air-gapped cluster (huggingface_hub reads HF_HUB_OFFLINE once, at import)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def test_the_presets_cover_the_families_methods_and_budgets():
    families = {path.parent.name for path in PRESETS}
    assert {"llama3", "qwen2.5", "qwen3", "gemma", "mistral", "phi4", "olmo2", "smollm2", "qwen2.5-vl"} <= families
    raw = [yaml.safe_load(path.read_text()) for path in PRESETS]
    assert {config["method"] for config in raw} == {"sft", "dpo", "grpo", "vl_sft"}
    assert any(config["model"].get("quantize") for config in raw)  # QLoRA
    assert any("num_experts" in config["model"]["shape"] for config in raw)  # a mixture of experts
    budgets = {(budget.text, budget.nproc) for budget in map(preset_budget, PRESETS)}
    assert budgets == {("24GiB", 1), ("80GiB", 1), ("80GiB", 8)}
    assert len(PRESETS) <= 40  # small: one file per model size, method and budget that people use


@pytest.mark.parametrize("path", PRESETS, ids=[str(path.relative_to(PRESETS_FOLDER)) for path in PRESETS])
def test_every_preset_plans_offline_within_its_budget(path):
    planned = planned_once(path)
    assert planned.estimate.peak <= planned.budget.bytes, (
        f"{path.name}: planned peak {format_bytes(planned.estimate.peak)} per GPU is over its budget "
        f"{planned.budget.text} ({planned.budget.nproc} GPU(s)):\n{planned.report}"
    )
    # the micro-batch the preset sets is one the planner finds within the budget
    assert "largest micro-batch within" in planned.report and "none:" not in planned.report


def test_the_docs_table_is_the_planners():
    from honing.plan.presets_table import presets_table

    table = presets_table(plan=planned_once)
    docs = (REPOSITORY / "docs" / "presets.md").read_text()
    assert table in docs, "docs/presets.md: regenerate its table with `python -m honing.plan.presets_table`"


def test_a_preset_without_its_budget_line_is_refused_in_one_line(tmp_path):
    from honing.errors import ConfigError

    path = tmp_path / "preset.yaml"
    path.write_text("method: sft\n")
    with pytest.raises(ConfigError, match=r"preset.yaml:1: expected the preset's budget, e.g. '# budget: 24GiB"):
        preset_budget(path)


def test_the_two_node_example_plans_offline_from_the_command_line():
    """The issue's own command: it ended in a 20-line OSError traceback without the hub."""
    result = subprocess.run(
        [sys.executable, "-m", "honing", "plan", "configs/multinode/sft-7b-2x8.yaml", "--nproc", "16",
         "--budget", "80GiB"],
        capture_output=True, text=True, cwd=REPOSITORY, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    said = [line for line in result.stderr.splitlines() if "model.shape" in line]
    assert len(said) == 1 and "Qwen/Qwen2.5-7B" in said[0] and "the hub cannot be reached" in said[0]
    assert "7.62B parameters" in result.stdout and "8 shard(s)" in result.stdout  # dp_shard 4 x tp 2
    assert "largest micro-batch within 80.00 GiB:" in result.stdout


def test_a_shape_mismatching_the_saved_folder_is_refused_by_plan_in_one_line(tmp_path, capsys):
    from honing.cli import main
    from honing.models.model_shape import config_from_shape

    shape = {"model_type": "qwen2", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}  # fmt: skip
    config_from_shape(shape).save_pretrained(tmp_path / "model")
    wrong = {**shape, "num_key_value_heads": 4}
    path = tmp_path / "run.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "method": "sft",
                "trainer": {"save_folder": str(tmp_path / "run")},
                "data": {"train": {"sources": [{"path": "data.jsonl"}]}},
                "model": {"name_or_path": str(tmp_path / "model"), "shape": wrong},
            }
        )
    )
    assert main(["plan", str(path)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert error == [
        f"honing: error: model.shape.num_key_value_heads: 4, but {tmp_path / 'model'}'s config.json has 2; "
        "correct model.shape (or model.name_or_path)"
    ]
    assert main(["plan", str(path), f"model.shape.num_key_value_heads={shape['num_key_value_heads']}"]) == 0


def test_plan_refuses_offline_a_layout_the_carried_shape_cannot_take(capsys):
    from honing.cli import main

    config = str(REPOSITORY / "configs" / "multinode" / "sft-7b-2x8.yaml")
    # tp=8 does not divide Qwen2.5-7B's 28 attention heads: the run would refuse it before training, so does plan
    assert main(["plan", config, "--nproc", "16", "parallel.tp=8", "parallel.dp_shard=1"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert error == ["honing: error: parallel.tp=8 must divide the model's num_attention_heads (28)"]
