"""A source's ``subset``: the configuration of a dataset read with ``datasets.load_dataset`` (Oumi's ``subset``, the
hub's "subset"), for fine-tuning rows, in-memory pretraining documents and ``honing prepare``; refused in one line
where ``load_dataset`` does not read the path. The dataset here is a local folder whose README declares two
configurations, as a hub repository's does (nothing is downloaded)."""

from __future__ import annotations

import json
import os

import pytest

from honing.data.prepare_finetune import rows_key
from honing.data.row_reader import iter_records, load_examples
from honing.data.sources import source_fields
from honing.data.text.documents import iter_text_documents, load_documents
from honing.data.text.prepare_inputs import iter_piece_texts, plan_sources
from honing.errors import DataError

README = """---
configs:
- config_name: short
  data_files:
  - split: train
    path: short/*.jsonl
  default: true
- config_name: long
  data_files:
  - split: train
    path: long/*.jsonl
---
"""
SHORT = ["a cat", "a dog"]
LONG = ["the quick brown fox jumps", "over the lazy dog again", "and sleeps until noon"]


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture
def two_subsets(tmp_path):
    """A dataset folder with the configurations ``short`` (the default) and ``long``, one train split each."""
    folder = tmp_path / "corpus"
    for name, texts in (("short", SHORT), ("long", LONG)):
        (folder / name).mkdir(parents=True)
        (folder / name / "train.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    (folder / "README.md").write_text(README)
    return folder


def test_records_documents_and_prepare_read_the_named_subset(two_subsets):
    path = f"{two_subsets}:train"
    assert [r.row["text"] for r in iter_records(path)] == SHORT  # the default configuration
    records = list(iter_records(path, subset="long"))
    assert [r.row["text"] for r in records] == LONG
    assert records[0].origin == f"{two_subsets}[long]:train[0]"  # a bad row's message names the subset
    assert [d.text for d in iter_text_documents(path, subset="long")] == LONG
    assert [d.text for d in load_documents([{"path": path, "subset": "long"}])] == LONG
    (shard,) = plan_sources([{"path": path, "subset": "long"}], 1 << 20).shards
    assert [part.text for piece in shard for part in iter_piece_texts(piece)] == LONG


def test_fine_tuning_rows_come_from_the_subset(two_subsets):
    rows = [{"prompt": text, "completion": " ok"} for text in LONG]
    (two_subsets / "long" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    found = load_examples([{"path": f"{two_subsets}:train", "subset": "long"}])
    assert len(found.examples) == 3 and found.origins[0].endswith("[long]:train[0]")


def test_a_subset_where_load_dataset_does_not_read_the_path_is_refused_naming_it(two_subsets, tmp_path):
    plain = two_subsets / "long" / "train.jsonl"
    with pytest.raises(DataError, match=r"train\.jsonl'.*subset names a configuration.*'long'.*names files"):
        list(iter_records(str(plain), subset="long"))
    with pytest.raises(DataError, match="names files"):
        list(iter_text_documents(str(plain), subset="long"))
    with pytest.raises(DataError, match="names files"):
        plan_sources([{"path": str(plain), "subset": "long"}], 1 << 20)
    datasets = pytest.importorskip("datasets")
    saved = tmp_path / "saved"
    datasets.Dataset.from_list([{"text": "x"}]).save_to_disk(str(saved))
    with pytest.raises(DataError, match="saved dataset folder"):
        list(iter_records(str(saved), subset="long"))
    with pytest.raises(DataError, match=r"subset 'missing'.*Available: \['short', 'long'\]"):
        list(iter_records(f"{two_subsets}:train", subset="missing"))
    with pytest.raises(DataError, match="subset must be a non-empty string"):
        source_fields({"path": str(plain), "subset": ""}, 0)


def test_prepared_rows_keep_their_key_without_a_subset_and_change_with_one(two_subsets):
    fields = source_fields({"path": f"{two_subsets}:train"}, 0)
    key = rows_key("sft", {}, [fields])
    assert key == rows_key("sft", {}, [{k: v for k, v in fields.items() if k != "subset"}])  # keys made before
    assert rows_key("sft", {}, [{**fields, "subset": "long"}]) != key


def test_oumis_pretraining_config_with_a_subset_translates_to_the_source_key():
    path = os.path.join(
        os.path.dirname(__file__), "..", "..", "..", "shared", "foreign-configs", "oumi", "recipes", "gpt2",
        "pretraining", "train.yaml",
    )  # fmt: skip
    if not os.path.exists(path):
        pytest.skip("../shared/foreign-configs is absent")
    from honing.interop.configs.loading import load_any_config

    config = load_any_config(path, [])
    (source,) = config.data.train.sources
    assert (source.path, source.subset) == ("HuggingFaceFW/fineweb-edu:train", "sample-10BT")


def test_preference_pairs_and_grpo_prompts_come_from_the_subset(two_subsets):
    from honing.data.preference.pairs import load_pairs
    from honing.data.prompts.prompts import load_prompts

    rows = [{"prompt": text, "chosen": " yes", "rejected": " no"} for text in LONG]
    (two_subsets / "long" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    source = {"path": f"{two_subsets}:train", "subset": "long"}
    assert [pair.prompt[0]["content"] for pair in load_pairs([source]).pairs] == LONG
    assert [origin for _, origin in load_prompts([source])][0].endswith("[long]:train[0]")
