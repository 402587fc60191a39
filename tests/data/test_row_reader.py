"""Tests for honing/data/row_reader.py: readers for every source kind, bad rows, weighting and streaming."""

from __future__ import annotations

import gzip
import json
import logging
import uuid
from collections import Counter
from types import SimpleNamespace

import fsspec
import pytest

from honing.data import file_rows
from honing.data.formats import Conversation, Message, PlainText
from honing.data.row_reader import BadRowReport, Record, iter_examples, iter_records, load_examples
from honing.data.sources import expand_paths
from honing.errors import DataError

ROWS = [{"text": f"row {i}"} for i in range(5)]


def write_jsonl(path, rows, extra_lines=()):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows) + "".join(line + "\n" for line in extra_lines))
    return str(path)


def chat(user: str, reply: str) -> dict:
    return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]}


def texts(examples) -> list[str]:
    return [example.text for example in examples]


def test_jsonl_origins_are_one_based_lines_and_blank_lines_are_skipped(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"text": "a"}\n\n{"text": "b"}\n')
    assert list(iter_records(str(path))) == [Record({"text": "a"}, f"{path}:1"), Record({"text": "b"}, f"{path}:3")]


def test_gzipped_jsonl(tmp_path):
    path = tmp_path / "rows.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"text": "zipped"}\n'))
    assert list(iter_records(str(path))) == [Record({"text": "zipped"}, f"{path}:1")]


def test_json_array_and_json_holding_json_lines(tmp_path):
    array = tmp_path / "array.json"
    array.write_text('\ufeff[\n  {"text": "a"},\n  {"text": "b"}\n]\n')
    assert list(iter_records(str(array))) == [
        Record({"text": "a"}, f"{array}[0]"),
        Record({"text": "b"}, f"{array}[1]"),
    ]
    lines = write_jsonl(tmp_path / "lines.json", ROWS[:2])
    assert [r.origin for r in iter_records(lines)] == [f"{lines}:1", f"{lines}:2"]


def test_parquet_streams_in_batches_with_zero_based_index(tmp_path, monkeypatch):
    import pyarrow
    import pyarrow.parquet

    path = tmp_path / "rows.parquet"
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(ROWS), path, row_group_size=2)
    monkeypatch.setattr(file_rows, "PARQUET_BATCH_ROWS", 2)  # three batches of 2, 2 and 1 rows
    assert list(iter_records(str(path))) == [Record(row, f"{path}[{i}]") for i, row in enumerate(ROWS)]


def test_saved_dataset_folder_and_saved_dataset_dict_split(tmp_path):
    import datasets

    datasets.Dataset.from_list(ROWS[:2]).save_to_disk(str(tmp_path / "saved"))
    assert list(iter_records(str(tmp_path / "saved"))) == [
        Record(ROWS[0], f"{tmp_path / 'saved'}[0]"),
        Record(ROWS[1], f"{tmp_path / 'saved'}[1]"),
    ]
    splits = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(ROWS[:1]), "test": datasets.Dataset.from_list(ROWS[3:4])}
    )
    splits.save_to_disk(str(tmp_path / "splits"))
    assert [r.row for r in iter_records(str(tmp_path / "splits"))] == [ROWS[0]]  # train by default
    assert list(iter_records(f"{tmp_path / 'splits'}:test")) == [Record(ROWS[3], f"{tmp_path / 'splits'}:test[0]")]
    with pytest.raises(DataError, match=r"holds the splits 'train', 'test'; name one as '.*splits:SPLIT', not 'dev'"):
        list(iter_records(f"{tmp_path / 'splits'}:dev"))


def test_load_dataset_on_a_local_folder_with_split(tmp_path):
    folder = tmp_path / "hubish"
    folder.mkdir()
    write_jsonl(folder / "train.jsonl", ROWS[:3])
    found = list(iter_records(f"{folder}:train"))
    assert found == [Record(row, f"{folder}:train[{i}]") for i, row in enumerate(ROWS[:3])]
    with pytest.raises(
        DataError,
        match=r"cannot load dataset '.*hubish' split 'validation' with "
        r"datasets.load_dataset \(ValueError: .*validation",
    ):
        list(iter_records(f"{folder}:validation"))


def test_hub_names_go_to_load_dataset_streaming(monkeypatch):
    import datasets

    calls = []

    def fake_load_dataset(name, split, streaming):
        calls.append((name, split, streaming))
        return iter([{"text": "from the hub"}])

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    assert list(iter_records("owner/name")) == [Record({"text": "from the hub"}, "owner/name:train[0]")]
    assert [r.origin for r in iter_records("owner/name:validation")] == ["owner/name:validation[0]"]
    assert calls == [("owner/name", "train", True), ("owner/name", "validation", True)]
    # A missing file has the owner/name shape too; it must fail as a missing path, not a hub lookup.
    with pytest.raises(DataError, match="no files match data path 'data/train.jsonl'"):
        list(iter_records("data/train.jsonl"))
    assert len(calls) == 2


def test_glob_and_folder_read_every_supported_file_in_order(tmp_path, caplog):
    write_jsonl(tmp_path / "b.jsonl", ROWS[2:3])
    write_jsonl(tmp_path / "a.jsonl", ROWS[:2])
    (tmp_path / "README.md").write_text("# about this data")
    assert [r.row["text"] for r in iter_records(str(tmp_path / "*.jsonl"))] == ["row 0", "row 1", "row 2"]
    assert [r.row["text"] for r in iter_records(str(tmp_path))] == ["row 0", "row 1", "row 2"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "skipped 1 file(s)" in warnings[0] and "README.md" in warnings[0]
    with pytest.raises(DataError, match=r"README.md: unsupported file type; expected .jsonl, .json or .parquet"):
        list(iter_records(str(tmp_path / "README.md")))


def test_memory_fsspec_url():
    root = f"memory://honing-records-{uuid.uuid4().hex}"
    fs = fsspec.filesystem("memory")
    fs.pipe(f"{root}/part-1.jsonl", b'{"text": "one"}\n')
    fs.pipe(f"{root}/part-2.json", b'[{"text": "two"}]')
    try:
        found = list(iter_records(f"{root}/*"))
        assert [r.row["text"] for r in found] == ["one", "two"]
        first, second = expand_paths(f"{root}/*")  # fsspec spells the URL memory:///...
        assert first.endswith("/part-1.jsonl") and [r.origin for r in found] == [f"{first}:1", f"{second}[0]"]
    finally:
        fs.rm(root, recursive=True)


def test_missing_path_and_invalid_json(tmp_path):
    with pytest.raises(DataError, match="no files match data path '.*nothing.jsonl'"):
        list(iter_records(str(tmp_path / "nothing.jsonl")))
    path = write_jsonl(tmp_path / "rows.jsonl", ROWS[:1], ['{"text": "cut', "[1]"])
    with pytest.raises(DataError, match=r"rows.jsonl:2: invalid JSON: Unterminated string .* at column 10"):
        list(iter_records(path))
    skipped = []
    found = list(iter_records(path, on_bad_row=lambda origin, reason: skipped.append((origin, reason))))
    assert [r.row for r in found] == ROWS[:1]
    assert [origin for origin, _ in skipped] == [f"{path}:2", f"{path}:3"]
    assert skipped[1][1] == "expected a JSON object, got list"
    broken = tmp_path / "broken.json"
    broken.write_text('[\n  {"text": "a"},\n  {"text": }\n]')
    with pytest.raises(
        DataError,
        match=r"broken.json:3: invalid JSON: Expecting value at column 12; "
        "a JSON array is read whole",
    ):
        list(iter_records(str(broken)))


def test_load_examples_detects_each_source_format(tmp_path):
    chats = write_jsonl(tmp_path / "chats.jsonl", [chat("hi", "hello")])
    alpaca = tmp_path / "alpaca.json"
    alpaca.write_text(json.dumps([{"instruction": "Add.", "input": "2 3", "output": "5"}]))
    plain = write_jsonl(tmp_path / "plain.jsonl", [{"body": "just text"}])
    result = load_examples([{"path": chats}, {"path": str(alpaca)}, {"path": plain, "text_field": "body"}])
    assert result.examples == [
        Conversation(messages=[Message(role="user", content="hi"), Message(role="assistant", content="hello")]),
        Conversation(messages=[Message(role="user", content="Add.\n\n2 3"), Message(role="assistant", content="5")]),
        PlainText(text="just text"),
    ]
    assert result.origins == [f"{chats}:1", f"{alpaca}[0]", f"{plain}:1"]
    assert result.report.count == 0 and result.report.summary() == "no bad rows"


@pytest.mark.parametrize(
    "line, reason",
    [
        (
            '{"messages": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}]}',
            r"unknown role 'bot' in messages\[1\]",
        ),
        (
            '{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": 7}]}',
            r"'content' must be a string or a list of content items, got int in messages\[1\]",
        ),
        ('{"messages": [{"role": "user", "content": "a"}', r"invalid JSON: Expecting ',' delimiter"),
        ('{"messages": [{"role": "user", "content": "a"}]}', r"no assistant message in 'messages'"),
        (
            '{"instruction": "i", "output": "o"}',
            r"row is in format 'alpaca' but the source's format is 'conversation' \(detected from .*data.jsonl:1\)",
        ),
    ],
)
def test_bad_rows_fail_with_file_and_line(tmp_path, line, reason):
    path = write_jsonl(tmp_path / "data.jsonl", [chat("q", "a"), chat("q2", "a2")], [line])
    with pytest.raises(DataError, match=rf"data.jsonl:3: {reason}"):
        load_examples([{"path": path}])


def test_a_broken_json_line_names_the_key_that_skips_it(tmp_path):
    path = write_jsonl(tmp_path / "data.jsonl", [chat("q", "a")], ['{"messages": [}'])
    with pytest.raises(DataError) as info:
        load_examples([{"path": path}])
    message = str(info.value)
    assert message.startswith(f"{path}:2: invalid JSON: ")
    assert message.endswith("; set data.bad_rows: skip to skip such rows") and "\n" not in message
    assert len(load_examples([{"path": path}], bad_rows="skip").examples) == 1  # and the key does skip it


def test_declared_format_is_used_instead_of_detection(tmp_path):
    path = write_jsonl(tmp_path / "data.jsonl", [{"instruction": "i", "output": "o", "text": "t"}])
    assert load_examples([{"path": path, "format": "text"}]).examples == [PlainText(text="t")]
    with pytest.raises(DataError, match=r"data.jsonl:1: missing key 'conversations'"):
        load_examples([{"path": path, "format": "sharegpt"}])
    with pytest.raises(
        DataError,
        match=r"unknown format 'jsonl' \('jsonl' reads text for pretraining; here use "
        r"'text'\); expected one of: auto, conversation",
    ):
        load_examples([{"path": path, "format": "jsonl"}])


def test_skip_mode_counts_reports_and_warns_once(tmp_path, caplog):
    first = write_jsonl(
        tmp_path / "first.jsonl",
        [chat("q", "a")],
        [
            '{"messages": [{"role": "bot", "content": "x"}]}',
            "not json",
            '{"messages": [{"role": "user", "content": "a"}]}',
        ],
    )
    second = write_jsonl(tmp_path / "second.jsonl", [chat("q", "a"), {"messages": "oops"}])
    result = load_examples([{"path": first}, {"path": second}], bad_rows="skip")
    assert len(result.examples) == 2 and result.origins == [f"{first}:1", f"{second}:1"]
    report = result.report
    assert report.count == 4 and report.per_source == {first: 3, second: 1}
    assert report.first_reasons == [
        f"{first}:2: unknown role 'bot' in messages[0]; expected one of: system, user, assistant, tool",
        f"{first}:3: invalid JSON: Expecting value at column 1; expected one JSON object per line",
        f"{first}:4: no assistant message in 'messages' (roles: user); fine-tuning needs a reply to learn",
        f"{second}:2: 'messages' must be a list of messages, got str",
    ]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [report.summary() + "; fix those rows, or set data.bad_rows: fail to stop at the first one"]
    assert report.summary().startswith(f"skipped 4 bad row(s) ({first}: 3, {second}: 1); first: {first}:2: ")


def test_report_keeps_only_the_first_five_reasons():
    report = BadRowReport()
    for line in range(1, 8):
        report.add("d.jsonl", f"d.jsonl:{line}", "bad")
    assert report.count == 7 and report.first_reasons == [f"d.jsonl:{line}: bad" for line in range(1, 6)]


def test_source_with_only_bad_rows_is_an_error_even_when_skipping(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [{"messages": "oops"}])
    with pytest.raises(DataError, match=r"data source 0 \('.*bad.jsonl'\) holds no examples \(1 bad row\(s\) skipped"):
        load_examples([{"path": path}], bad_rows="skip")


def test_weights_and_max_samples_give_exact_counts(tmp_path):
    ten = write_jsonl(tmp_path / "ten.jsonl", [{"text": f"a{i}"} for i in range(10)])
    four = write_jsonl(tmp_path / "four.jsonl", [{"text": f"b{i}"} for i in range(4)])
    sources = [
        {"path": ten, "max_samples": 3, "weight": 2.0},  # first 3 rows, twice: 6
        SimpleNamespace(path=four, format="auto", weight=0.5, max_samples=None, text_field="text"),
    ]  # 2 of 4
    result = load_examples(sources, seed=1)
    names = texts(result.examples)
    assert names[:6] == ["a0", "a1", "a2"] * 2
    assert len(names) == 8 and len(set(names[6:])) == 2 and set(names[6:]) <= {"b0", "b1", "b2", "b3"}
    assert result.origins[:3] == [f"{ten}:1", f"{ten}:2", f"{ten}:3"]
    assert texts(load_examples(sources, seed=1).examples) == names  # deterministic under the seed
    assert len({tuple(texts(load_examples(sources, seed=s).examples)[6:]) for s in range(8)}) > 1
    repeated = load_examples([{"path": four, "weight": 1.5}], seed=0)
    assert Counter(texts(repeated.examples)).total() == 6 and texts(repeated.examples)[:4] == ["b0", "b1", "b2", "b3"]


def test_max_samples_stops_reading_before_later_bad_rows(tmp_path):
    path = write_jsonl(tmp_path / "rows.jsonl", ROWS[:2], ["not json"])
    assert texts(load_examples([{"path": path, "max_samples": 2}]).examples) == ["row 0", "row 1"]


def test_iter_examples_interleaves_by_weight_each_example_once(tmp_path):
    big = write_jsonl(tmp_path / "big.jsonl", [{"text": f"a{i}"} for i in range(30)])
    small = write_jsonl(tmp_path / "small.jsonl", [{"text": f"b{i}"} for i in range(10)])
    sources = [{"path": big, "weight": 3.0}, {"path": small, "weight": 1.0}]
    stream = list(iter_examples(sources, seed=5))
    names = [example.text for example, _ in stream]
    assert sorted(names) == sorted([f"a{i}" for i in range(30)] + [f"b{i}" for i in range(10)])
    assert [n for n in names if n.startswith("a")] == [f"a{i}" for i in range(30)]  # file order within a source
    assert names != sorted(names, key=lambda n: (n[0], int(n[1:])))  # interleaved, not concatenated
    assert [origin for _, origin in stream] == [f"{big if n[0] == 'a' else small}:{int(n[1:]) + 1}" for n in names]
    assert [e.text for e, _ in iter_examples(sources, seed=5)] == names
    assert [e.text for e, _ in iter_examples(sources, seed=6)] != names


def test_iter_examples_skip_mode_fills_the_given_report(tmp_path):
    path = write_jsonl(tmp_path / "rows.jsonl", ROWS[:2], ['{"text": 3}'])
    report = BadRowReport()
    assert [e.text for e, _ in iter_examples([{"path": path}], bad_rows="skip", report=report)] == ["row 0", "row 1"]
    assert report.count == 1 and report.first_reasons == [f"{path}:3: 'text' must be a string, got int"]


def test_bad_rows_policy_is_checked():
    with pytest.raises(DataError, match="bad_rows must be 'fail' or 'skip', got 'ignore'"):
        load_examples([], bad_rows="ignore")
