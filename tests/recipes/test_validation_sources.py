"""Several validation sources: each one's own ``eval/<name>/*`` beside ``eval/*`` over all of them, which stays what
one source holding the same rows gives (olmOCR's users pick a best model per validation set)."""

from __future__ import annotations

import json

import pytest

from honing.config import ConfigError, validate
from honing.recipes import recipe_for
from tests.recipes.test_sft import sft_config


def conversations(path, words):
    rows = [
        {"messages": [{"role": "user", "content": word}, {"role": "assistant", "content": word[::-1]}]}
        for word in words
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def eval_metrics(tmp_path, name, sources):
    config = sft_config(
        tmp_path / name,
        data={"validation": {"sources": sources}},
        callbacks={"evaluator": {"interval": 2}, "checkpointer": {"save_interval": 100}},
    )
    recipe_for(config).run()
    rows = [json.loads(line) for line in (tmp_path / name / "run" / "metrics.jsonl").read_text().splitlines()]
    return {key: value for row in rows if row["step"] == 4 for key, value in row.items() if key.startswith("eval/")}


def test_each_source_has_its_metrics_and_the_whole_split_is_unchanged(tmp_path):
    held_out = tmp_path / "held_out"
    held_out.mkdir()
    conversations(held_out / "a.jsonl", ["apple", "banana", "cherry", "damson", "elder", "fig"])
    conversations(held_out / "b_file.jsonl", ["grape", "hazel", "iris", "juniper"])
    two = eval_metrics(
        tmp_path,
        "two",
        [{"path": str(held_out / "a.jsonl"), "name": "first"}, {"path": str(held_out / "b_file.jsonl")}],
    )
    whole = eval_metrics(tmp_path, "whole", [{"path": str(held_out)}])  # the folder: both files as one source
    first = eval_metrics(tmp_path, "first", [{"path": str(held_out / "a.jsonl")}])

    assert {"eval/first/loss", "eval/b_file/loss", "eval/first/token_accuracy", "eval/b_file/perplexity"} <= set(two)
    assert "eval/whole/loss" not in whole and "eval/held_out/loss" not in whole  # one source: no per-source keys
    # the same model (same training rows and seed) over the same rows: the sums add over sources
    assert two["eval/loss"] == pytest.approx(whole["eval/loss"], rel=1e-6)
    assert two["eval/token_accuracy"] == pytest.approx(whole["eval/token_accuracy"], rel=1e-6)
    assert two["eval/first/loss"] == pytest.approx(first["eval/loss"], rel=1e-6)
    assert two["eval/first/loss"] != pytest.approx(two["eval/b_file/loss"], rel=1e-3)


def test_a_source_name_is_refused_where_no_per_source_metric_uses_it(tmp_path):
    raw = sft_config(tmp_path).model_dump(mode="json", exclude_unset=True)
    raw["data"]["train"]["sources"][0]["name"] = "train_set"
    with pytest.raises(ConfigError, match=r"data\.train\.sources\[0\]\.name: not used by method 'sft' \(a name"):
        validate(raw)
    raw["data"]["train"]["sources"][0].pop("name")
    raw["method"] = "pretrain"  # its validation loss is one number (GRPO's rewards are per source: eval/<name>/reward)
    raw["data"]["validation"]["sources"][0]["name"] = "held"
    with pytest.raises(ConfigError, match=r"data\.validation\.sources\[0\]\.name: not used by method 'pretrain'"):
        validate(raw)
    raw["method"] = "sft"
    raw["data"]["validation"]["sources"][0]["name"] = "held out/2"
    with pytest.raises(ConfigError, match=r"data\.validation\.sources\[0\]\.name"):
        validate(raw)
