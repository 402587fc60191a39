"""Rows prepared once (``honing prepare`` or the cache training prepares into) train exactly as raw sources do, for
every method: the same losses bit for bit and the same data report. The cache is keyed by what makes the rows (a
changed input, template or tokenizer, or a longer seq_len, prepares again); an interrupted prepare resumes; a
prepared folder made with other settings, or cut shorter than seq_len, is refused."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from honing.config import validate
from honing.data import prepare_finetune
from honing.data.chat.chat_rows import ChatRows
from honing.data.prepared_rows import COLUMNS, PreparedRows
from honing.errors import DataError
from honing.recipes.build_run import data_alone
from honing.recipes.dpo import DPORecipe
from honing.recipes.grpo import GRPORecipe
from honing.recipes.prepare_rows import prepare_split
from honing.recipes.sft import SFTRecipe
from honing.recipes.vl_sft import VLSFTRecipe
from tests.recipes.test_dpo import dpo_config
from tests.recipes.test_grpo import grpo_raw
from tests.recipes.test_sft import sft_config
from tests.recipes.test_vl_sft import transcriptions, vl_config  # noqa: F401  (a fixture)

GOOD = {"messages": [{"role": "user", "content": "Say hi"}, {"role": "assistant", "content": "hi"}]}
IMAGE = {"messages": [{"role": "user", "content": [{"type": "image_path", "content": "x.png"}]}, GOOD["messages"][1]]}
NO_ANSWER = {"messages": [{"role": "user", "content": "Anyone?"}]}
CUT = {"messages": [{"role": "user", "content": "y" * 60}, {"role": "assistant", "content": "z" * 100}]}
NOTHING_LEFT = {"messages": [{"role": "user", "content": "y" * 150}, {"role": "assistant", "content": "ok"}]}
UNREADABLE = {"messages": [{"role": "bot", "content": "hi"}]}


def losses(folder):
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [row["train/loss"] for row in rows if "train/loss" in row]


def train(recipe_class, raw, folder):
    """Train ``raw`` into ``folder``: its losses and data reports."""
    raw = copy.deepcopy(raw)
    raw["trainer"].update(save_folder=str(folder), metrics_collect_interval=1)
    recipe = recipe_class(validate(raw))
    recipe.run()
    return losses(folder), {split: dataclasses.asdict(report) for split, report in recipe.data_reports.items()}


def from_prepared(recipe_class, raw, tmp_path):
    """``raw`` with each split's sources prepared into a folder (as `honing prepare` does) and named instead."""
    prepared = copy.deepcopy(raw)
    for split in ("train", "validation"):
        if raw["data"].get(split):
            out = tmp_path / f"prepared-{split}"
            rows, built = prepare_split(recipe_class(validate(copy.deepcopy(raw))), str(out), split=split)
            assert built and len(rows) > 0
            prepared["data"][split] = {"sources": [{"path": str(out)}]}
    return prepared


def assert_same_training(recipe_class, raw, tmp_path, steps):
    """Raw sources in memory (as before prepared rows), through the cache, and from prepared folders: the same."""
    raw = copy.deepcopy(raw)
    raw["trainer"]["max_duration"] = f"{steps}steps"
    memory = copy.deepcopy(raw)
    memory["data"]["cache_rows"] = False
    reference = train(recipe_class, memory, tmp_path / "memory")
    assert len(reference[0]) == steps
    assert train(recipe_class, raw, tmp_path / "cached") == reference
    assert train(recipe_class, from_prepared(recipe_class, raw, tmp_path), tmp_path / "prepared") == reference
    return reference


def test_sft_from_prepared_rows_trains_bit_identically(tmp_path):
    chat = tmp_path / "chat.jsonl"
    rows = [GOOD] * 5 + [IMAGE, GOOD, NO_ANSWER, CUT, NOTHING_LEFT, UNREADABLE] + [GOOD] * 3
    chat.write_text("".join(json.dumps(row) + "\n" for row in rows))
    sources = [{"path": "generated:reverse?samples=48&seed=0", "weight": 1.5}, {"path": str(chat)}]
    data = {"train": {"sources": sources}, "validation": None, "validation_split": 0.1, "bad_rows": "skip"}
    raw = sft_config(tmp_path, data=data).model_dump(exclude_unset=True)
    _, reports = assert_same_training(SFTRecipe, raw, tmp_path, steps=10)
    # the image row rejected, one long row cut and one dropped (nothing to learn in its head), the rows without an
    # answer or with an unknown role skipped while reading
    totals = {key: sum(reports[split][key] for split in reports) for key in ("rejected", "truncated", "dropped")}
    assert totals == {"rejected": 1, "truncated": 1, "dropped": 1} and reports["validation"]["examples"] > 0


def test_dpo_from_prepared_rows_trains_bit_identically(tmp_path):
    raw = dpo_config(tmp_path, data={"overlong": "truncate", "seq_len": 24}).model_dump(exclude_unset=True)
    _, reports = assert_same_training(DPORecipe, raw, tmp_path, steps=10)
    assert reports["train"]["truncated"] > 0


def test_grpo_from_prepared_rows_trains_bit_identically(tmp_path):
    raw = grpo_raw(tmp_path)
    raw["data"]["train"]["sources"][0]["weight"] = 1.5
    assert_same_training(GRPORecipe, raw, tmp_path, steps=3)


def test_vl_sft_from_prepared_rows_trains_bit_identically(tmp_path, transcriptions):  # noqa: F811
    raw = vl_config(tmp_path, transcriptions, data={"validation_split": 0.25}).model_dump(exclude_unset=True)
    _, reports = assert_same_training(VLSFTRecipe, raw, tmp_path, steps=4)
    assert reports["train"]["images_per_example"] == [1] * 6


# --- the cache -----------------------------------------------------------------------------------------------------
def build_data(tmp_path, **data):
    """What `honing data` runs: the recipe's processor and rows, no model."""
    recipe = SFTRecipe(sft_config(tmp_path, data=data))
    recipe.data_reports = data_alone(recipe)[1].reports
    return recipe


def prepares(tmp_path):
    """One entry per prepare that built rows, over every cache entry."""
    return [
        json.loads(line)
        for log in sorted((tmp_path / "cache" / "prepared").glob("*/prepare.log"))
        for line in log.read_text().splitlines()
    ]


def test_the_cache_prepares_again_only_when_what_makes_the_rows_changes(tmp_path):
    from honing.data.tokenizer import build_tokenizer

    chat = tmp_path / "chat.jsonl"
    chat.write_text(json.dumps(GOOD) + "\n")
    data = {"train": {"sources": [{"path": str(chat), "weight": 8}]}, "validation": None, "packing": False}
    reference = build_data(tmp_path, **data).data_reports["train"]
    assert len(prepares(tmp_path)) == 1
    build_data(tmp_path, **data)  # nothing changed: read from the cache
    again = build_data(tmp_path, **{**data, "seq_len": 64, "train": {"sources": [{"path": str(chat), "weight": 4}]}})
    assert len(prepares(tmp_path)) == 1 and again.data_reports["train"].examples == reference.examples // 2
    build_data(tmp_path, **data, seq_len=256)  # longer than the rows were cut at
    assert len(prepares(tmp_path)) == 2
    build_data(tmp_path, **data, chat_template="llama3")
    assert len(prepares(tmp_path)) == 3
    build_data(tmp_path, **data, train_on="all")
    assert len(prepares(tmp_path)) == 4
    tokenizer = build_tokenizer("byte")
    tokenizer.add_tokens(["<extra>"])
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    config = sft_config(tmp_path, data=data, tokenizer={"kind": "pretrained", "path": str(tmp_path / "tokenizer")})
    recipe = SFTRecipe(config)
    data_alone(recipe)
    assert len(prepares(tmp_path)) == 5
    chat.write_text(json.dumps(GOOD).replace("hi", "ho") + "\n")  # the same size, other content
    assert build_data(tmp_path, **data).data_reports["train"].tokens == reference.tokens
    assert len(prepares(tmp_path)) == 6


def test_a_prepared_folder_made_otherwise_or_cut_shorter_is_refused(tmp_path):
    prepare_split(SFTRecipe(sft_config(tmp_path)), str(tmp_path / "rows"))
    prepared = {"train": {"sources": [{"path": str(tmp_path / "rows")}]}, "validation": None}
    with pytest.raises(DataError, match=r"prepared with another tokenizer and chat_template than .*honing prepare"):
        build_data(tmp_path, **prepared, chat_template="llama3")
    with pytest.raises(DataError, match=r"cut at 128 tokens, shorter than data.seq_len \(256\)"):
        build_data(tmp_path, **prepared, seq_len=256)
    with pytest.raises(DataError, match=r"holds sft rows; this run reads dpo rows"):
        raw = dpo_config(tmp_path).model_dump(exclude_unset=True)
        raw["data"]["train"] = prepared["train"]
        DPORecipe(validate(raw)).run()
    (tmp_path / "rows" / "labels.npy").write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(DataError, match=r"rows/labels\.npy: not a readable column"):
        build_data(tmp_path, **prepared)


def test_an_interrupted_prepare_keeps_its_finished_ranges(tmp_path, monkeypatch):
    monkeypatch.setattr(prepare_finetune, "RANGE_ROWS", 16)
    config = sft_config(tmp_path, data={"train": {"sources": [{"path": "generated:reverse?samples=70&seed=0"}]}})
    whole, _ = prepare_split(SFTRecipe(config), str(tmp_path / "whole"), workers=1)

    calls, build_rows = [], ChatRows.build

    def interrupted(kind, items):
        calls.append(len(items))
        if len(calls) == 3:
            raise KeyboardInterrupt  # as a Ctrl-C or a kill between two ranges
        return build_rows(kind, items)

    monkeypatch.setattr(ChatRows, "build", interrupted)
    with pytest.raises(KeyboardInterrupt):
        prepare_split(SFTRecipe(config), str(tmp_path / "rows"), workers=1)
    monkeypatch.setattr(ChatRows, "build", build_rows)
    assert sorted(path.name for path in (tmp_path / "rows" / "ranges").glob("*.json")) == [
        "range-00000.json",
        "range-00001.json",
    ]
    with pytest.raises(DataError, match=r"rows/index\.json: missing"):  # never taken as complete
        PreparedRows(str(tmp_path / "rows"))
    resumed, built = prepare_split(SFTRecipe(config), str(tmp_path / "rows"), workers=2)  # two worker processes
    assert built
    log = [json.loads(line) for line in (tmp_path / "rows" / "prepare.log").read_text().splitlines()]
    assert [(entry["built"], entry["reused"]) for entry in log] == [(3, 2)]
    assert len(resumed) == len(whole) == 70
    for name in COLUMNS["sft"]:
        assert (resumed.column(name) == whole.column(name)).all(), name


def test_an_image_changed_in_place_prepares_its_rows_again(tmp_path, transcriptions):  # noqa: F811
    from tests.recipes.test_vl_sft import draw

    def build():
        recipe = VLSFTRecipe(vl_config(tmp_path, transcriptions))
        return data_alone(recipe)[1].reports["train"]

    before = build()
    build()
    assert len(prepares(tmp_path)) == 1
    draw(tmp_path / "digits0.png", "000", (112, 56))  # the same name, four times the pixels
    after = build()
    assert len(prepares(tmp_path)) == 2
    assert after.pixels_before[0] == 4 * before.pixels_before[0]
