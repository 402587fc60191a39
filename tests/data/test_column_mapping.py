"""Rows in columns of their own read through a source's ``columns`` / ``roles``: local Parquet and JSONL files with a
hub data set's column names become honing's alpaca rows, conversations and preference pairs; a pretraining source
reads its text column; the mapping keys the prepared rows, and what cannot be mapped is refused in one line."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from honing.config import ConfigError
from honing.data.column_mapping import mapped_row
from honing.data.preference.pairs import load_pairs
from honing.data.prepare_finetune import rows_key
from honing.data.row_reader import load_examples
from honing.data.sources import source_fields
from honing.data.text.documents import load_documents
from honing.errors import DataError
from tests.recipes.test_sft import sft_config


def test_columns_are_renamed_swapped_and_messages_keys_and_speakers_mapped():
    row = {"q": "2+2?", "a": "4", "keep": 1}
    assert mapped_row(row, {"instruction": "q", "output": "a"}, {}) == {"instruction": "2+2?", "output": "4", "keep": 1}
    assert mapped_row({"input": "x", "output": "y"}, {"input": "output", "output": "input"}, {}) == {
        "input": "y",
        "output": "x",
    }
    dialogue = {"turns": [{"speaker": "HUMAN", "text": "hi"}, {"speaker": "BOT", "text": "yo"}]}
    mapped = mapped_row(
        dialogue, {"messages": "turns", "role": "speaker", "content": "text"}, {"HUMAN": "user", "BOT": "assistant"}
    )
    assert mapped == {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}


def write_parquet(path, table):
    pq.write_table(pa.table(table), path)
    return str(path)


def test_a_parquet_file_in_a_hub_sets_columns_reads_as_alpaca_rows(tmp_path):
    path = write_parquet(tmp_path / "qa.parquet", {"question": ["2+2?", "3+3?"], "response": ["4", "6"]})
    found = load_examples([{"path": path, "columns": {"instruction": "question", "output": "response"}}])
    assert [[(m.role, m.content) for m in example.messages] for example in found.examples] == [
        [("user", "2+2?"), ("assistant", "4")],
        [("user", "3+3?"), ("assistant", "6")],
    ]
    with pytest.raises(DataError, match="cannot detect the format from the keys 'question', 'response'"):
        load_examples([{"path": path}])  # without the mapping: the one-line format error


def test_a_jsonl_dialogue_with_its_own_keys_and_speakers_reads_as_a_conversation(tmp_path):
    path = tmp_path / "chats.jsonl"
    row = {"dialog": [{"who": "customer", "says": "hello"}, {"who": "agent", "says": "hi there"}]}
    path.write_text(json.dumps(row) + "\n")
    source = {
        "path": str(path),
        "columns": {"messages": "dialog", "role": "who", "content": "says"},
        "roles": {"customer": "user", "agent": "assistant"},
    }
    (example,) = load_examples([source]).examples
    assert [(m.role, m.content) for m in example.messages] == [("user", "hello"), ("assistant", "hi there")]
    # ShareGPT's keys inside each message: from / value with the speakers mapped to ShareGPT's
    sharegpt = {**source, "columns": {"conversations": "dialog", "from": "who", "value": "says"},
                "roles": {"customer": "human", "agent": "gpt"}}  # fmt: skip
    (again,) = load_examples([sharegpt]).examples
    assert again.messages == example.messages


def test_preference_pairs_in_their_own_columns(tmp_path):
    path = write_parquet(tmp_path / "pairs.parquet", {"query": ["Say hi"], "good": ["hi"], "bad": ["bye"]})
    pairs = load_pairs([{"path": path, "columns": {"prompt": "query", "chosen": "good", "rejected": "bad"}}]).pairs
    (pair,) = pairs
    assert pair.prompt[-1]["content"] == "Say hi"
    assert pair.chosen[-1]["content"] == "hi" and pair.rejected[-1]["content"] == "bye"


def test_pretraining_reads_the_mapped_text_column_and_refuses_other_mappings(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"body": f"document {i}"}) + "\n" for i in range(3)))
    docs = load_documents([{"path": str(path), "format": "jsonl", "columns": {"text": "body"}}])
    assert [doc.text for doc in docs] == ["document 0", "document 1", "document 2"]
    with pytest.raises(DataError, match=r"pretraining reads one text column; roles cannot be mapped"):
        load_documents([{"path": str(path), "format": "jsonl", "columns": {"text": "body"}, "roles": {"a": "user"}}])


def test_the_mapping_keys_the_prepared_rows_and_leaves_unmapped_keys_as_they_were(tmp_path):
    path = write_parquet(tmp_path / "qa.parquet", {"question": ["q"], "response": ["a"]})
    plain = source_fields({"path": path}, 0)
    mapped = source_fields({"path": path, "columns": {"instruction": "question", "output": "response"}}, 0)
    assert rows_key("sft", {}, [plain]) != rows_key("sft", {}, [mapped])
    assert rows_key("sft", {}, [plain]) == rows_key("sft", {}, [{**plain, "columns": None, "roles": None}])


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"columns": {"instruction": "q"}, "dataset": "alpaca"}, "give a source's columns or its dataset, not both"),
        ({"columns": {"instruction": 3}}, "columns"),
    ],
)
def test_a_mapping_that_cannot_apply_is_refused_in_one_line(tmp_path, source, message):
    train = {"sources": [{"path": str(tmp_path / "x.jsonl"), **source}]}
    with pytest.raises(ConfigError, match=message):
        sft_config(tmp_path, data={"train": train})
