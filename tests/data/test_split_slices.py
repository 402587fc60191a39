"""Sliced splits in a source path (``folder:train[90%:]``) take the rows ``datasets`` itself takes for that slice,
from a saved dataset folder and from a folder ``load_dataset`` reads; Oumi's sliced ``split`` becomes such a path."""

from __future__ import annotations

import json

import pytest

from honing.data.row_reader import iter_records
from honing.errors import DataError

ROWS = [{"prompt": f"q{i}", "completion": f"a{i}"} for i in range(20)]


@pytest.fixture
def saved(tmp_path):
    import datasets

    folder = tmp_path / "saved"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS)}).save_to_disk(str(folder))
    return folder


@pytest.mark.parametrize("split", ["train[90%:]", "train[:25%]", "train[-3:]", "train[5:8]", "train[10%:20%]"])
def test_a_saved_folders_slice_is_the_rows_datasets_takes(saved, tmp_path, split):
    import datasets

    # datasets' own reading of the same rows as files, with the same slice
    files = tmp_path / "files"
    files.mkdir()
    (files / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    expected = list(datasets.load_dataset(str(files), split=split))
    assert expected and len(expected) < len(ROWS)
    records = list(iter_records(f"{saved}:{split}"))
    assert [record.row for record in records] == expected
    assert records[0].origin.startswith(f"{saved}:{split}[")
    # the same slice of a folder that load_dataset reads (not saved): read whole, then sliced
    assert [record.row for record in iter_records(f"{files}:{split}")] == expected


def test_a_slice_datasets_cannot_read_is_refused_in_one_line(saved):
    with pytest.raises(DataError, match=r"saved:train\[1:2:3\]: 'train\[1:2:3\]' is no split slice datasets reads"):
        list(iter_records(f"{saved}:train[1:2:3]"))


def test_oumis_sliced_split_becomes_the_source_paths_slice(tmp_path):
    from honing.interop.configs.oumi_data import translate_dataset
    from honing.interop.configs.translation import Keys, Translation

    for split, expected in (("train[90%:]", "GAIR/LIMO:train[90%:]"), ("test[:10%]", "GAIR/LIMO:test[:10%]")):
        t = Translation("oumi")
        item = Keys(t, {"dataset_name": "GAIR/LIMO", "split": split}, "data.train.datasets[0]")
        assert translate_dataset(t, item, "sft")["path"] == expected and not t.refused
    t = Translation("oumi")
    item = Keys(t, {"dataset_name": "GAIR/LIMO", "split": "train[1:2:3]"}, "data.train.datasets[0]")
    translate_dataset(t, item, "sft")
    assert len(t.refused) == 1 and "data.train.datasets[0].split" in t.refused[0]
