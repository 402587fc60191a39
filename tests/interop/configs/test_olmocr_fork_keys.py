"""Keys of olmOCR's forks that users' configs carry: a step's ``verbose`` and ``dataloader_prefetch_factor`` (posicube's
KolmOCR) change nothing, one note each; zzeennoo's ``ChandraHTMLPrompt`` (not an olmOCR step) is refused by name."""

from __future__ import annotations

import copy

from honing.interop.configs import translate
from tests.interop.configs.test_olmocr_configs import PIPELINE, TRAINER


def test_verbose_steps_and_prefetch_factor_are_noted_and_change_nothing():
    raw = copy.deepcopy(TRAINER)
    for split in ("train", "eval"):
        raw["dataset"][split][0]["pipeline"] = [{**step, "verbose": True} for step in PIPELINE]
    raw["training"]["dataloader_prefetch_factor"] = 12
    translation = translate(raw)
    assert translation.refused == [] and translation.config == translate(TRAINER).config
    verbose = [
        note
        for note in translation.notes
        if note.startswith("dataset.train[0].pipeline[") and ".verbose: not needed" in note
    ]
    assert len(verbose) == len(PIPELINE)
    assert any(note.startswith("training.dataloader_prefetch_factor: unused") for note in translation.notes)


def test_a_forks_prompt_step_is_refused_naming_the_fork():
    raw = copy.deepcopy(TRAINER)
    steps = [step for step in PIPELINE if step["name"] != "NewYamlFinetuningPromptWithNoAnchoring"]
    chandra = [*steps[:7], {"name": "ChandraHTMLPrompt", "use_layout": False}, *steps[7:]]
    for split in ("train", "eval"):
        raw["dataset"][split][0]["pipeline"] = chandra
    train_line, eval_line = translate(raw).refused
    assert train_line.startswith("dataset.train[0].pipeline[7]: pipeline step 'ChandraHTMLPrompt' is not available: ")
    assert "zzeennoo/olmocr" in train_line and eval_line.startswith("dataset.eval[0].pipeline[7]: ")


def test_eval_strategy_is_read_as_olmocrs_evaluation_strategy():
    raw = copy.deepcopy(TRAINER)
    raw["training"].update({"eval_strategy": "steps", "eval_steps": 40})
    translation = translate(raw)
    assert translation.refused == [] and translation.config["callbacks"]["evaluator"]["interval"] == 40
    raw["training"]["eval_strategy"] = "epoch"  # transformers' epoch strategy: honing's every_epoch
    translation = translate(raw)
    assert translation.refused == [] and translation.config["callbacks"]["evaluator"]["every_epoch"] is True
    raw["training"]["eval_strategy"] = "best"
    assert translate(raw).refused == [
        "training.eval_strategy: 'best' is not available: honing runs eval_steps every N steps (or every epoch)"
    ]
