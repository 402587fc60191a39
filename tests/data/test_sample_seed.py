"""``sample_seed`` with ``max_samples``: the random subset ``datasets``' shuffle(seed).take(n) keeps (Oumi's
``shuffle`` with ``sample_count``), for fine-tuning rows and pretraining documents alike."""

from __future__ import annotations

import json

import datasets
import pytest
from pydantic import ValidationError

from honing.config.schema import SourceSection
from honing.data.row_reader import load_examples
from honing.data.subset import seeded_subset
from honing.data.text.documents import load_documents
from honing.errors import DataError


def kept_by_datasets(rows: int, count: int, seed: int) -> list[int]:
    """The row indices ``datasets`` keeps, in file order."""
    table = datasets.Dataset.from_dict({"index": list(range(rows))})
    return sorted(table.shuffle(seed=seed).take(min(count, rows))["index"])


@pytest.mark.parametrize("rows, count, seed", [(100, 10, 7), (40, 40, 0), (10, 25, 3), (500, 37, 42)])
def test_the_subset_is_the_one_datasets_shuffle_and_take_keep(rows, count, seed):
    assert seeded_subset(range(rows), count, seed) == kept_by_datasets(rows, count, seed)


def write_rows(path, texts, bad_at=()):
    with open(path, "w", encoding="utf-8") as handle:
        for index, text in enumerate(texts):
            handle.write("not json\n" if index in bad_at else json.dumps({"text": text}) + "\n")
    return str(path)


def test_fine_tuning_rows_are_a_seeded_subset_of_the_valid_rows_in_file_order(tmp_path):
    path = write_rows(tmp_path / "rows.jsonl", [f"row {i}" for i in range(30)])
    picked = load_examples([{"path": path, "max_samples": 6, "sample_seed": 5}]).examples
    assert [example.text for example in picked] == [f"row {i}" for i in kept_by_datasets(30, 6, 5)]
    head = load_examples([{"path": path, "max_samples": 6}]).examples
    assert [example.text for example in head] == [f"row {i}" for i in range(6)]  # without the seed: the first rows
    # bad rows are skipped before the choice: the subset is drawn among the 28 valid rows
    with_bad = write_rows(tmp_path / "bad.jsonl", [f"row {i}" for i in range(30)], bad_at=(0, 1))
    found = load_examples([{"path": with_bad, "max_samples": 6, "sample_seed": 5}], bad_rows="skip").examples
    assert [example.text for example in found] == [f"row {i + 2}" for i in kept_by_datasets(28, 6, 5)]


def test_pretraining_documents_take_the_same_subset(tmp_path):
    path = write_rows(tmp_path / "docs.jsonl", [f"doc {i}" for i in range(50)])
    documents = load_documents([SourceSection(path=path, max_samples=4, sample_seed=9)])
    assert [document.text for document in documents] == [f"doc {i}" for i in kept_by_datasets(50, 4, 9)]


def test_a_seed_without_a_count_or_below_zero_is_refused_in_one_line(tmp_path):
    with pytest.raises(ValidationError, match="sample_seed chooses max_samples rows at random: set max_samples"):
        SourceSection(path="rows.jsonl", sample_seed=1)
    path = write_rows(tmp_path / "rows.jsonl", ["a", "b"])
    with pytest.raises(DataError, match=r"sample_seed chooses max_samples rows at random; set max_samples"):
        load_examples([{"path": path, "sample_seed": 1}])
    with pytest.raises(DataError, match=r"sample_seed must be an integer >= 0 or null, got -1"):
        load_examples([{"path": path, "max_samples": 1, "sample_seed": -1}])
