"""Tests for honing/data/text/documents.py: path expansion, text and JSONL reading, weighted loading."""

from __future__ import annotations

import json
import sysconfig
import uuid
from types import SimpleNamespace

import fsspec
import pytest

from honing.config.schema import SourceSection
from honing.data.sources import expand_paths
from honing.data.text.documents import Document, iter_text_documents, load_documents
from honing.errors import DataError


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture
def tree(tmp_path):
    """a.txt, b.txt, sub/c.txt, sub/d.jsonl, .git/config (hidden)."""
    (tmp_path / "sub").mkdir()
    (tmp_path / ".git").mkdir()
    (tmp_path / "b.txt").write_text("bee")
    (tmp_path / "a.txt").write_text("ay")
    (tmp_path / "sub" / "c.txt").write_text("sea")
    write_jsonl(tmp_path / "sub" / "d.jsonl", [{"text": "dee 1"}, {"text": "dee 2"}])
    (tmp_path / ".git" / "config").write_text("[core]")
    return tmp_path


def test_expand_paths_file_folder_glob(tree):
    assert expand_paths(str(tree / "a.txt")) == [str(tree / "a.txt")]
    assert expand_paths(str(tree)) == [str(tree / p) for p in ("a.txt", "b.txt", "sub/c.txt", "sub/d.jsonl")]
    assert expand_paths(str(tree / "**" / "*.txt")) == [str(tree / p) for p in ("a.txt", "b.txt", "sub/c.txt")]
    assert expand_paths(str(tree / "*.txt")) == [str(tree / "a.txt"), str(tree / "b.txt")]
    assert expand_paths(f"file://{tree}/sub") == [str(tree / "sub/c.txt"), str(tree / "sub/d.jsonl")]


def test_expand_paths_no_match_names_the_pattern(tree):
    with pytest.raises(DataError, match=r"no files match data path '.*\*\.parquet'"):
        expand_paths(str(tree / "*.parquet"))
    with pytest.raises(DataError, match="no files match data path '.*missing.txt'"):
        expand_paths(str(tree / "missing.txt"))


def test_memory_filesystem_urls():
    root = f"memory://honing-test-{uuid.uuid4().hex}"
    fs = fsspec.filesystem("memory")
    fs.pipe(f"{root}/x/2.txt", b"two")
    fs.pipe(f"{root}/x/1.txt", b"one")
    try:
        files = expand_paths(f"{root}/x")
        assert [f.rsplit("/", 1)[1] for f in files] == ["1.txt", "2.txt"] and files[0].startswith("memory://")
        assert [doc.text for doc in iter_text_documents(f"{root}/**/*.txt")] == ["one", "two"]
    finally:
        fs.rm(f"{root}", recursive=True)


def test_auto_format_reads_text_whole_and_jsonl_per_line(tree):
    docs = list(iter_text_documents(str(tree)))
    assert docs == [
        Document("ay", str(tree / "a.txt")),
        Document("bee", str(tree / "b.txt")),
        Document("sea", str(tree / "sub/c.txt")),
        Document("dee 1", f"{tree / 'sub/d.jsonl'}:1"),
        Document("dee 2", f"{tree / 'sub/d.jsonl'}:2"),
    ]
    as_text = list(iter_text_documents(str(tree / "sub/d.jsonl"), format="text"))
    assert len(as_text) == 1 and as_text[0].text.startswith('{"text": "dee 1"}')


def test_jsonl_custom_field_skips_blank_lines_and_empty_documents(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"body": "one"}\n\n{"body": ""}\n{"body": "three", "other": 1}\n')
    docs = list(iter_text_documents(str(path), text_field="body"))
    assert [(d.text, d.origin) for d in docs] == [("one", f"{path}:1"), ("three", f"{path}:4")]


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"text": "ok"', r"rows.jsonl:2: invalid JSON \(.*at column \d+\); expected one JSON object per line"),
        ('["a list"]', r"rows.jsonl:2: expected a JSON object, got list \[\"a list\"\]"),
        ('{"content": "x"}', r"rows.jsonl:2: no field 'text' \(fields: 'content'\); set the source's text_field"),
        ('{"text": 42}', r"rows.jsonl:2: field 'text' is int 42, expected a string"),
        ('{"text": null}', r"rows.jsonl:2: field 'text' is NoneType null, expected a string"),
    ],
)
def test_jsonl_errors_name_file_and_line(tmp_path, line, message):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"text": "fine"}\n' + line + "\n")
    with pytest.raises(DataError, match=message):
        list(iter_text_documents(str(path)))


def test_jsonl_invalid_utf8_names_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"text": "a"}\n{"text": "\xff"}\n')
    with pytest.raises(DataError, match=r"rows.jsonl:2: not valid UTF-8"):
        list(iter_text_documents(str(path)))


def test_non_utf8_text_files_are_skipped_with_one_warning(tmp_path, caplog):
    (tmp_path / "good.txt").write_text("fine")
    for name in ("latin1.txt", "latin2.txt"):
        (tmp_path / name).write_bytes("café".encode("latin-1"))
    docs = list(iter_text_documents(str(tmp_path)))
    assert [d.text for d in docs] == ["fine"]
    warnings = [r for r in caplog.records if "not valid UTF-8" in r.getMessage()]
    assert len(warnings) == 1 and "skipped 2 file(s)" in warnings[0].getMessage()


def test_unknown_format_is_an_error(tree):
    with pytest.raises(DataError, match="unknown data format 'csv'.*expected one of: auto, text, jsonl"):
        list(iter_text_documents(str(tree), format="csv"))


def test_stdlib_placeholder_reads_real_python_sources():
    docs = list(iter_text_documents("{stdlib}/json/[de]*.py"))
    stdlib = sysconfig.get_paths()["stdlib"]
    assert [d.origin for d in docs] == [f"{stdlib}/json/decoder.py", f"{stdlib}/json/encoder.py"]
    assert "class JSONDecoder" in docs[0].text


def test_load_documents_weights_and_max_samples(tmp_path):
    rows = write_jsonl(tmp_path / "rows.jsonl", [{"text": f"doc {i}"} for i in range(10)])
    (tmp_path / "one.txt").write_text("single")
    sources = [
        {"path": str(rows), "weight": 2.5, "max_samples": 4},  # 4 docs twice + 2 of them once more
        SourceSection(path=str(tmp_path / "one.txt")),
    ]  # a pydantic source object, weight 1
    docs = load_documents(sources, seed=3)
    texts = [d.text for d in docs]
    assert texts[:8] == ["doc 0", "doc 1", "doc 2", "doc 3"] * 2
    assert len(texts) == 11 and texts[-1] == "single"
    extra = texts[8:10]
    assert len(set(extra)) == 2 and set(extra) <= {"doc 0", "doc 1", "doc 2", "doc 3"}
    assert [d.text for d in load_documents(sources, seed=3)] == texts  # deterministic under the seed
    picks = {tuple(d.text for d in load_documents(sources, seed=s)[8:10]) for s in range(10)}
    assert len(picks) > 1  # the seed decides which fraction is taken


def test_load_documents_fractional_weight_only(tmp_path):
    rows = write_jsonl(tmp_path / "rows.jsonl", [{"text": f"doc {i}"} for i in range(10)])
    docs = load_documents(
        [SimpleNamespace(path=str(rows), format="jsonl", weight=0.3, text_field="text", max_samples=None)]
    )
    indices = [int(d.text.split()[1]) for d in docs]
    assert len(indices) == 3 and indices == sorted(set(indices))  # a subset, in file order


@pytest.mark.parametrize(
    "source, message",
    [
        ({"path": "x", "weight": 0}, r"data source 0 \('x'\): weight must be a number > 0, got 0"),
        ({"path": "x", "weight": -1.5}, r"weight must be a number > 0, got -1.5"),
        ({"path": "x", "max_samples": 0}, r"max_samples must be an integer >= 1 or null, got 0"),
        ({"path": "x", "wieght": 2}, r"data source 0: unknown key\(s\) 'wieght'; expected: path, format, weight"),
        ({"weight": 1}, r"data source 0: path must be a non-empty string, got None"),
    ],
)
def test_load_documents_rejects_bad_sources(source, message):
    with pytest.raises(DataError, match=message):
        load_documents([source])


def test_load_documents_source_without_documents(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(DataError, match=r"data source 0 \('.*empty.txt'\) holds no non-empty documents"):
        load_documents([{"path": str(tmp_path / "empty.txt")}])
