"""Every export of a run (``hf/``, ``best/``, ``honing export``, ``honing merge``) carries a README.md model card
that huggingface_hub parses, naming the data (with rows) and the metrics, without any secret; and a scorer given
by import path in ``callbacks.generation_eval.metrics`` is recorded as ``eval/<name>``."""

from __future__ import annotations

import json

import pytest
from huggingface_hub import ModelCard

from honing.cli import main
from honing.evaluate.harness import write_results
from tests.infer.conftest import SECRET, TRAIN

pytestmark = pytest.mark.slow


def test_scorer_by_import_path_is_recorded_as_its_mean(lora_run):
    answers = [json.loads(line) for line in (lora_run / "generation_eval.jsonl").read_text().splitlines()]
    logged = {row["step"]: row for row in map(json.loads, (lora_run / "metrics.jsonl").read_text().splitlines())}
    for step in (0, 2):
        rows = [row for row in answers if row["step"] == step]
        assert len(rows) == 4
        scored = [float(r["answer"][:1] == r["expected"][:1]) for r in rows if r["answer"]]  # None when empty
        assert scored  # the model answered something: the scorer saw real answers
        assert [r["first_letter_right"] for r in rows if r["answer"]] == scored
        if scored:
            assert logged[step]["eval/first_letter_right"] == pytest.approx(sum(scored) / len(scored))


def test_every_export_has_a_model_card_naming_data_and_metrics_without_secrets(lora_run, tmp_path):
    assert main(["export", str(lora_run / "step2"), str(tmp_path / "exported")]) == 0
    # a run evaluated by `honing eval` (or callbacks.harness_eval): later exports show the harness's table
    harness = {"metrics": {"exact_match": 0.25}, "stderr": {"exact_match": 0.1}, "samples": 8, "task": "reverse"}
    write_results(str(lora_run), {"reverse": harness}, step=2)
    assert main(["merge", str(lora_run / "step2"), str(tmp_path / "merged")]) == 0
    assert "| reverse | exact_match | 0.2500 ± 0.1000 | 8 |" in (tmp_path / "merged" / "README.md").read_text()
    for folder in (lora_run / "hf", lora_run / "best", tmp_path / "exported", tmp_path / "merged"):
        text = (folder / "README.md").read_text()
        card = ModelCard.load(folder / "README.md")  # the Hub's parser: YAML metadata, then the text
        assert card.data.license == "mit" and card.data.language == ["en"], folder
        assert "honing" in card.data.tags and "lora" in card.data.tags
        assert f"| train | 64 | `{TRAIN}` |" in text, folder  # the data, with its rows
        assert "| validation | 8 |" in text
        assert "| eval/loss |" in text and "| eval/first_letter_right |" in text and "| train/loss |" in text
        assert "first_letter_right" in card.data.metrics
        assert str(lora_run.parent.parent) in text  # the base model: the quickstart's export
        assert SECRET not in text and "api_key: '***'" in text, folder
    assert not (lora_run / "adapter" / "README.md").read_text().count(SECRET)  # peft's own card, no config
