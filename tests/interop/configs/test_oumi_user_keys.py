"""Keys Oumi's users write beyond Oumi's own recipes: ``dataset_kwargs.data_files`` (datasets' packaged builders) as
the source's path, and the keys that change nothing in honing (one note each, the config unchanged)."""

from __future__ import annotations

import pytest

from honing.config import validate
from honing.data.text.documents import load_documents
from tests.interop.configs.test_oumi_options import BASE, noted, refusals, translated, with_changes


def test_data_files_of_the_text_builder_are_the_source_path(tmp_path):
    (tmp_path / "notes.txt").write_text("first line\nsecond line\n")
    dataset = {"dataset_name": "text", "dataset_path": str(tmp_path / "old.txt"), "split": "train",
               "dataset_kwargs": {"data_files": [str(tmp_path / "notes.txt")]}}  # fmt: skip
    translation = translated(**{"data.train.datasets": [dataset]})
    assert translation.config["method"] == "pretrain"
    assert translation.config["data"]["train"]["sources"] == [{"path": str(tmp_path / "notes.txt")}]
    assert "Oumi reads 'text' from dataset_kwargs.data_files" in noted(
        translation, "data.train.datasets[0].dataset_path"
    )
    config = validate(translation.config, source="oumi")
    documents = load_documents(config.data.train.sources, seed=0, separator=config.data.text_document_separator)
    assert "first line" in "".join(doc.text for doc in documents)  # the data_files file, not dataset_path


@pytest.mark.parametrize(
    "name, files, why",
    [
        ("org/corpus", ["a.jsonl"], "reads the hub data set 'org/corpus' whole"),
        ("json", ["a.jsonl", "b.jsonl"], "2 files in one dataset"),
        ("json", {"test": "a.jsonl"}, "expected a file, a glob"),
    ],
)
def test_data_files_honing_cannot_read_so_are_refused_in_one_line(name, files, why):
    dataset = {"dataset_name": name, "dataset_kwargs": {"data_files": files}}
    line = refusals(**{"data.train.datasets": [dataset]})[0]  # then: no dataset left in the split
    assert line.startswith("data.train.datasets[0].dataset_kwargs.data_files: ") and why in line


def test_loading_machinery_and_seeded_sampler_keys_change_nothing():
    base = translated()
    keys = {
        "data.train.use_async_dataset": True,
        "data.train.experimental_use_torch_datapipes": True,
        "training.trainer_kwargs": {"use_seedable_sampler": True, "dataset_kwargs": {"skip_prepare_dataset": True}},
    }
    translation = translated(**keys)
    assert translation.config == base.config
    for key in ("data.train.use_async_dataset", "data.train.experimental_use_torch_datapipes",
                "training.trainer_kwargs.use_seedable_sampler",
                "training.trainer_kwargs.dataset_kwargs.skip_prepare_dataset"):  # fmt: skip
        assert "not needed" in noted(translation, key)
    other = {"training.trainer_kwargs": {"dataset_kwargs": {"add_special_tokens": False}}}
    assert refusals(**other) == [
        "training.trainer_kwargs.dataset_kwargs.add_special_tokens: not translated: not available: TRL reads "
        "skip_prepare_dataset only; honing builds its rows itself"
    ]
    assert with_changes() == BASE
