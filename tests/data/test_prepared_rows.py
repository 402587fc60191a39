"""Prepared rows on disk: every column kind round-trips, ranges join into one file per column, and a damaged folder
is refused with a DataError naming the file (preparing it again repairs it)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from honing.data.prepare_finetune import prepare_rows
from honing.data.prepared_rows import BUILT, REJECTED, PreparedRows, is_prepared_folder
from honing.data.row_reader import BadRowReport
from honing.errors import DataError

ROWS = [
    {"prompt_ids": [1, 2, 3], "prompt": [{"role": "user", "content": "hi"}], "columns": {"answer": "a", "n": 1}},
    DataError("not a prompt"),
    {"prompt_ids": [], "prompt": "plain text", "columns": {}},
]


def prepare(folder, rows=ROWS, key="k"):
    """A grpo folder of ``rows`` (one source), built in this process."""
    items = [(index, f"file.jsonl:{index + 1}") for index in range(len(rows))]
    return prepare_rows(
        str(folder),
        method="grpo",
        key=key,
        settings={"tokenizer": "t"},
        sources=[{"path": "file.jsonl", "format": "prompt", "weight": 1.0, "text_field": "text", "max_samples": None}],
        read=lambda: ([items], BadRowReport()),
        build=lambda indices: [rows[index] for index in indices],
        cut=None,
        workers=1,
    )


def test_every_column_kind_round_trips(tmp_path):
    rows, built = prepare(tmp_path / "rows")
    assert built and is_prepared_folder(str(tmp_path / "rows")) and len(rows) == 3
    first, rejected, last = (rows.row(index) for index in range(3))
    assert first == {
        "status": BUILT,
        "origin": "file.jsonl:1",
        "reason": "",
        **ROWS[0],
    }
    assert rejected["status"] == REJECTED and rejected["reason"] == "not a prompt" and rejected["prompt"] is None
    assert last["prompt_ids"] == [] and last["prompt"] == "plain text" and last["columns"] == {}
    assert [source.rows for source in rows.sources] == [3]
    again, built = prepare(tmp_path / "rows")
    assert not built and again.index["key"] == "k"


def test_token_shards_are_not_prepared_rows(tmp_path):
    (tmp_path / "index.json").write_text(json.dumps({"format": "honing-token-shards-v1"}))
    assert not is_prepared_folder(str(tmp_path))


@pytest.mark.parametrize(
    "damage, named",
    [
        (
            lambda folder: (folder / "prompt_ids.npy").write_bytes((folder / "prompt_ids.npy").read_bytes()[:-4]),
            "prompt_ids.npy",
        ),
        (lambda folder: np.save(folder / "columns.offsets.npy", np.arange(4, dtype=np.int64)), "columns.offsets.npy"),
        (lambda folder: (folder / "status.npy").unlink(), "status.npy"),
        (lambda folder: np.save(folder / "origin.npy", np.zeros(3, dtype=np.float32)), "origin.npy"),
        (lambda folder: (folder / "index.json").write_text("{not json"), "index.json"),
    ],
)
def test_a_damaged_folder_is_refused_naming_the_file(tmp_path, damage, named):
    folder = tmp_path / "rows"
    prepare(folder)
    damage(folder)
    assert is_prepared_folder(str(folder))
    with pytest.raises(DataError, match=rf"rows/{named}.*prepare"):
        PreparedRows(str(folder))
    rows, built = prepare(folder)  # preparing it again repairs it
    assert built and rows.row(0)["prompt_ids"] == [1, 2, 3]
