"""Prepared token shards: the file format, ``prepare_tokens`` (streamed inputs, text files of any size in bounded
pieces, workers, atomic publish, resume, no-op re-runs) and ``TokenRows`` (mixing, seeded order, rank slices,
document masking)."""

from __future__ import annotations

import json
import os
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from honing.data.loader import DataLoader
from honing.data.text import pieces as text_pieces
from honing.data.text import token_shards, token_windows
from honing.data.text.corpus import tokenize_documents
from honing.data.text.documents import load_documents
from honing.data.text.prepare import prepare_tokens
from honing.data.text.token_shards import ShardWriter, open_shard, read_index, shard_name, token_dtype
from honing.data.text.token_windows import RowWindow, TokenRows, TokenSource, split_windows
from honing.data.tokenizer import build_tokenizer
from honing.errors import DataError
from honing.losses import IGNORE_INDEX

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def documents(count: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(3, 60)))) + f" #{i}" for i in range(count)]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer("byte")


def write_jsonl(path, docs):
    path.write_text("".join(json.dumps({"text": doc}) + "\n" for doc in docs))
    return str(path)


def all_documents(folder) -> list[list[int]]:
    """Every document's tokens, in shard order."""
    found = []
    for shard in read_index(str(folder)).shards:
        tokens, starts = open_shard(os.path.join(folder, shard.file))
        bounds = [*starts.tolist(), len(tokens)]
        found += [tokens[a:b].tolist() for a, b in zip(bounds, bounds[1:])]
    return found


def test_prepared_tokens_equal_the_in_memory_corpus(tmp_path, tokenizer):
    docs = documents(300)
    text_files = tmp_path / "texts"
    text_files.mkdir()
    for i, doc in enumerate(docs[:5]):
        (text_files / f"{i}.txt").write_text(doc)
    sources = [{"path": write_jsonl(tmp_path / "a.jsonl", docs[5:])}, {"path": str(text_files), "format": "text"}]
    # 1 KiB shards: the JSON Lines file is cut into byte ranges, each line read by exactly one of them
    result = prepare_tokens(sources, tokenizer, str(tmp_path / "out"), workers=1, shard_bytes=1024)
    index = result.index
    assert len(index.shards) > 5 and index.dtype == "uint16" and index.num_documents == 300
    expected = tokenize_documents(docs[5:] + docs[:5], tokenizer, cache_dir=None)
    found = all_documents(tmp_path / "out")
    assert np.array_equal(np.concatenate(found), expected.tokens)
    assert [len(doc) for doc in found] == np.diff(expected.doc_starts, append=len(expected.tokens)).tolist()
    assert all(doc[-1] == tokenizer.eos_token_id for doc in found)
    assert tokenizer.decode(found[0][:-1]) == docs[5]
    assert {shard.source for shard in index.shards} == {0, 1}


def test_two_workers_write_the_same_bytes_as_one(tmp_path, tokenizer):
    sources = [{"path": write_jsonl(tmp_path / "a.jsonl", documents(200))}]
    prepare_tokens(sources, tokenizer, str(tmp_path / "one"), workers=1, shard_bytes=2048)
    prepare_tokens(sources, tokenizer, str(tmp_path / "two"), workers=2, shard_bytes=2048)
    names = sorted(name for name in os.listdir(tmp_path / "one") if name.startswith("shard-"))
    assert len(names) > 2 and names == sorted(n for n in os.listdir(tmp_path / "two") if n.startswith("shard-"))
    for name in names:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()


def test_parquet_and_saved_dataset_sources_stream_into_shards(tmp_path, tokenizer):
    import datasets
    import pyarrow
    import pyarrow.parquet

    docs = documents(120)
    table = pyarrow.table({"body": docs[:80], "n": list(range(80))})
    pyarrow.parquet.write_table(table, tmp_path / "a.parquet", row_group_size=16)  # 5 row groups
    datasets.Dataset.from_dict({"text": docs[80:]}).save_to_disk(str(tmp_path / "saved"))
    sources = [
        {"path": str(tmp_path / "a.parquet"), "text_field": "body"},
        {"path": str(tmp_path / "saved")},
    ]
    index = prepare_tokens(sources, tokenizer, str(tmp_path / "out"), workers=1, shard_bytes=600).index
    assert len(index.shards) >= 3
    assert [tokenizer.decode(doc[:-1]) for doc in all_documents(tmp_path / "out")] == docs


def test_token_dtype_follows_the_vocabulary_size(tmp_path):
    assert token_dtype(258) == np.uint16 and token_dtype(65536) == np.uint16
    assert token_dtype(65537) == np.uint32 and token_dtype(151_000) == np.uint32
    writer = ShardWriter(str(tmp_path / shard_name(0)), token_dtype(100_000))
    writer.add_document([99_999, 70_000, 1])
    writer.add_document([5])
    writer.publish()
    tokens, starts = open_shard(str(tmp_path / shard_name(0)))
    assert tokens.dtype == np.uint32 and tokens.tolist() == [99_999, 70_000, 1, 5] and starts.tolist() == [0, 3]
    small = ShardWriter(str(tmp_path / shard_name(1)), np.uint16)
    with pytest.raises(DataError, match="does not fit uint16"):
        small.add_document([70_000])
    small.discard()
    assert os.listdir(tmp_path) == [shard_name(0)]


def test_rerun_is_a_no_op_and_changed_input_prepares_again(tmp_path, tokenizer):
    path = write_jsonl(tmp_path / "a.jsonl", documents(100))
    out = str(tmp_path / "out")
    first = prepare_tokens([{"path": path}], tokenizer, out, workers=1, shard_bytes=1024)
    stamps = {name: os.stat(os.path.join(out, name)).st_mtime_ns for name in os.listdir(out)}
    again = prepare_tokens([{"path": path}], tokenizer, out, workers=1, shard_bytes=1024)
    assert again.up_to_date and again.written == [] and again.index.key == first.index.key
    assert {name: os.stat(os.path.join(out, name)).st_mtime_ns for name in os.listdir(out)} == stamps
    # keyed by the input's content: a touched file is the same input, an edit that keeps size and time is not
    os.utime(path, (1, 1))
    assert prepare_tokens([{"path": path}], tokenizer, out, workers=1, shard_bytes=1024).up_to_date
    data = bytearray(open(path, "rb").read())
    data[data.index(b'"text": "') + 9] ^= 1  # one character of the first document, same length
    open(path, "wb").write(bytes(data))
    os.utime(path, (1, 1))
    edited = prepare_tokens([{"path": path}], tokenizer, out, workers=1, shard_bytes=1024)
    assert not edited.up_to_date and edited.index.key != first.index.key

    write_jsonl(tmp_path / "a.jsonl", documents(50, seed=1))
    changed = prepare_tokens([{"path": path}], tokenizer, out, workers=1, shard_bytes=1024)
    assert not changed.up_to_date and changed.index.key != first.index.key and changed.index.num_documents == 50
    assert len([name for name in os.listdir(out) if name.startswith("shard-")]) == len(changed.index.shards)


def test_interrupted_prepare_resumes_and_redoes_only_missing_shards(tmp_path, tokenizer, monkeypatch):
    import honing.data.text.prepare as prepare_module

    path = write_jsonl(tmp_path / "a.jsonl", documents(200))
    out = tmp_path / "out"
    calls = {"n": 0}
    encode_into = prepare_module._encode_into

    def crash_on_fourth(*args):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt  # as if the run were stopped in the middle of shard 3
        encode_into(*args)

    monkeypatch.setattr(prepare_module, "_encode_into", crash_on_fourth)
    with pytest.raises(KeyboardInterrupt):
        prepare_tokens([{"path": path}], tokenizer, str(out), workers=1, shard_bytes=1024)
    monkeypatch.setattr(prepare_module, "_encode_into", encode_into)
    assert not (out / "index.json").exists()
    done = sorted(name for name in os.listdir(out) if name.startswith("shard-"))
    assert done == [shard_name(i) for i in range(3)]  # the shard being written never appeared
    # a temporary file left by a killed worker, and a truncated shard: never read, redone
    (out / ".tmp-abc-shard-00004.bin").write_bytes(b"partial")
    (out / shard_name(1)).write_bytes((out / shard_name(1)).read_bytes()[:-5])
    stamp = os.stat(out / shard_name(0)).st_mtime_ns

    result = prepare_tokens([{"path": path}], tokenizer, str(out), workers=1, shard_bytes=1024)
    assert 1 in result.written and 0 not in result.written and 2 not in result.written
    assert os.stat(out / shard_name(0)).st_mtime_ns == stamp
    assert not any(name.startswith(".tmp-") for name in os.listdir(out))
    reference = prepare_tokens([{"path": path}], tokenizer, str(tmp_path / "ref"), workers=1, shard_bytes=1024)
    assert result.index.key == reference.index.key
    for shard in reference.index.shards:
        assert (out / shard.file).read_bytes() == (tmp_path / "ref" / shard.file).read_bytes()


def test_a_worker_killed_mid_shard_fails_cleanly_and_a_rerun_finishes(tmp_path, tokenizer, monkeypatch):
    import signal

    import honing.data.text.prepare as prepare_module

    path = write_jsonl(tmp_path / "a.jsonl", documents(200))
    encode_into = prepare_module._encode_into

    def kill_in_shard_2(writer, *args):
        if writer.target.endswith(shard_name(2)):
            os.kill(os.getpid(), signal.SIGKILL)  # the forked worker inherits this patch; the parent does not run it
        encode_into(writer, *args)

    monkeypatch.setattr(prepare_module, "_encode_into", kill_in_shard_2)
    with pytest.raises(DataError, match="a prepare worker died"):
        prepare_tokens([{"path": path}], tokenizer, str(tmp_path / "out"), workers=2, shard_bytes=1024)
    monkeypatch.setattr(prepare_module, "_encode_into", encode_into)
    assert not (tmp_path / "out" / shard_name(2)).exists() and not (tmp_path / "out" / "index.json").exists()

    result = prepare_tokens([{"path": path}], tokenizer, str(tmp_path / "out"), workers=2, shard_bytes=1024)
    assert 2 in result.written and not any(name.startswith(".tmp-") for name in os.listdir(tmp_path / "out"))
    reference = prepare_tokens([{"path": path}], tokenizer, str(tmp_path / "ref"), workers=1, shard_bytes=1024)
    assert all_documents(tmp_path / "out") == all_documents(tmp_path / "ref")
    assert result.index.key == reference.index.key


def test_bad_json_line_names_the_file_and_byte(tmp_path, tokenizer):
    path = tmp_path / "a.jsonl"
    path.write_text('{"text": "fine"}\n{"text": oops}\n')
    with pytest.raises(DataError, match=r"a\.jsonl \(line at byte 17\): invalid JSON"):
        prepare_tokens([{"path": str(path)}], tokenizer, str(tmp_path / "out"), workers=1)
    assert not any(name.startswith(("shard-", ".tmp-")) for name in os.listdir(tmp_path / "out"))


def stdlib_text(megabytes: float) -> str:
    """Real text: standard-library sources joined by blank lines, repeated to about ``megabytes``."""
    root = Path(sysconfig.get_paths()["stdlib"]) / "json"
    text = "\n\n".join(path.read_text(encoding="utf-8") for path in sorted(root.glob("*.py")))
    return (text + "\n\n") * max(1, round(megabytes * 2**20 / len(text)))


@pytest.mark.parametrize("separator", [None, "\n\n"])
def test_a_text_file_larger_than_a_piece_and_a_shard_gives_the_ids_of_reading_it_whole(
    tmp_path, tokenizer, monkeypatch, separator
):
    path = tmp_path / "big.txt"
    path.write_text(stdlib_text(0.1) + "é tail without a newline", encoding="utf-8")
    # 4 KiB pieces read 1 KiB at a time: documents (and with no separator, the file) are tokenized in pieces;
    # 16 KiB shards: the file is cut into byte ranges that workers read apart
    monkeypatch.setattr(text_pieces, "PIECE_BYTES", 4096)
    monkeypatch.setattr(text_pieces, "READ_BYTES", 1024)
    source = {"path": str(path), "format": "text"}
    result = prepare_tokens(
        [source], tokenizer, str(tmp_path / "out"), workers=2, shard_bytes=16384, separator=separator
    )
    documents = load_documents([source], separator=separator)
    expected = tokenize_documents([document.text for document in documents], tokenizer, cache_dir=None)
    index = read_index(str(tmp_path / "out"))
    assert len(index.shards) > 5 and index.num_documents == len(documents) and (len(documents) > 100) == bool(separator)
    shards = [open_shard(str(tmp_path / "out" / shard.file)) for shard in index.shards]
    assert np.concatenate([tokens for tokens, _ in shards]).tolist() == expected.tokens.tolist()
    offsets = np.cumsum([0] + [len(tokens) for tokens, _ in shards[:-1]])
    starts = np.concatenate([starts + offset for (_, starts), offset in zip(shards, offsets)])
    assert starts.tolist() == expected.doc_starts.tolist()  # a document split across shards starts once
    assert (
        result.index.key
        != prepare_tokens(  # another separator is another input
            [{"path": str(path), "format": "text"}],
            tokenizer,
            str(tmp_path / "other"),
            workers=1,
            shard_bytes=16384,
            separator="\n" if separator else "\n\n",
        ).index.key
    )


def test_a_text_range_that_is_not_utf8_is_left_out_with_a_warning(tmp_path, tokenizer, caplog):
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.txt").write_text("fine one")
    (tmp_path / "texts" / "b.txt").write_bytes(b"first document\n\nthen \xff a bad byte")
    (tmp_path / "texts" / "c.txt").write_text("fine two")
    with caplog.at_level("WARNING"):
        prepare_tokens(
            [{"path": str(tmp_path / "texts")}], tokenizer, str(tmp_path / "out"), workers=1, separator="\n\n"
        )
    assert [tokenizer.decode(doc[:-1]) for doc in all_documents(tmp_path / "out")] == ["fine one", "fine two"]
    assert "b.txt: not valid UTF-8 text (byte 21)" in caplog.text


def test_the_writer_streams_document_starts_and_rolls_back(tmp_path, monkeypatch):
    monkeypatch.setattr(token_shards, "STARTS_BUFFER", 2)  # starts go to disk every two documents
    writer = ShardWriter(str(tmp_path / shard_name(0)), np.uint16)
    for length in (3, 1, 4):
        writer.add_document(np.full(length, length))
    mark = writer.mark()
    writer.add_tokens([9, 9], (0,))
    writer.add_tokens([8])  # the same document goes on
    writer.add_document([7, 7, 7])
    writer.rollback(mark)
    writer.add_tokens([5, 5, 6], (0, 2))
    assert writer.publish().documents == 5
    tokens, starts = open_shard(str(tmp_path / shard_name(0)))
    assert tokens.tolist() == [3, 3, 3, 1, 4, 4, 4, 4, 5, 5, 6] and starts.tolist() == [0, 3, 4, 8, 10]
    assert os.listdir(tmp_path) == [shard_name(0)]  # no temporary file left


# ---- reading: TokenRows -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, tokenizer):
    """Two prepared folders: ``a`` (200 documents) and ``b`` (100), in several shards each."""
    root = tmp_path_factory.mktemp("prepared")
    folders = {}
    for name, count, seed in (("a", 200, 0), ("b", 100, 1)):
        path = write_jsonl(root / f"{name}.jsonl", documents(count, seed))
        prepare_tokens([{"path": path}], tokenizer, str(root / name), workers=1, shard_bytes=2048)
        folders[name] = str(root / name)
    return folders, str(root / "cache")


def rows_of(prepared, weights, seq_len=16, **kwargs):
    folders, cache = prepared
    windows = [
        RowWindow(source, 0, source.num_rows, weight)
        for source, weight in ((TokenSource(folders[name], seq_len, cache_dir=cache), w) for name, w in weights)
    ]
    return TokenRows(windows, **kwargs)


def test_rows_are_cut_inside_shards_from_the_memory_map(prepared):
    rows = rows_of(prepared, [("a", 1.0)])
    source = rows.windows[0].source
    assert len(rows) == source.num_rows == sum(len(t) // 16 for t in source.tokens)
    tokens, shard, start = source.row(len(rows) - 1)
    assert isinstance(tokens, np.memmap)
    item = rows[len(rows) - 1]
    assert item["input_ids"].tolist() == tokens[start : start + 16].tolist() == item["labels"].tolist()
    assert sum(rows.document_lengths(3)) == 16 and rows.tokens_per_row == 16


def test_mixing_weights_give_the_expected_proportions(prepared):
    rows = rows_of(prepared, [("a", 1.0), ("b", 0.5)])
    a_rows, b_rows = (w.source.num_rows for w in rows.windows)
    assert len(rows) == a_rows + round(0.5 * b_rows)
    picked = [rows.source_of(i) for i in range(len(rows))]
    assert sum(number == 1 for number, _ in picked) == round(0.5 * b_rows)
    assert len(set(picked)) == len(picked)  # no row twice at weights <= 1
    doubled = rows_of(prepared, [("a", 2.0), ("b", 1.0)])
    counts = np.bincount([doubled.source_of(i)[1] for i in range(2 * a_rows)], minlength=a_rows)
    assert counts.tolist() == [2] * a_rows
    # in a seeded epoch the mixture shows up in every stretch of batches, not in one block
    loader = DataLoader(rows, global_batch_size=8, seed=3)
    first_half = loader.order(1)[: len(rows) // 2]
    share = np.mean([rows.source_of(int(i))[0] == 1 for i in first_half])
    assert abs(share - round(0.5 * b_rows) / len(rows)) < 0.1


def test_fractional_weights_of_a_large_window_pick_rows_without_holding_them(prepared, monkeypatch):
    monkeypatch.setattr(token_windows, "HELD_ROWS", 10)  # a window of more rows picks through a computed order
    rows = rows_of(prepared, [("a", 1.0), ("b", 0.5)])
    b_rows = rows.windows[1].source.num_rows
    assert b_rows > 10 and len(rows) == rows.windows[0].source.num_rows + round(0.5 * b_rows)
    picked = [rows.source_of(i) for i in range(len(rows))]
    assert sum(number == 1 for number, _ in picked) == round(0.5 * b_rows)
    assert len(set(picked)) == len(picked) and all(row < b_rows for number, row in picked if number == 1)
    assert picked == [rows_of(prepared, [("a", 1.0), ("b", 0.5)]).source_of(i) for i in range(len(rows))]


def test_same_seed_same_order_other_epoch_other_order_no_replacement(prepared):
    rows = rows_of(prepared, [("a", 1.0), ("b", 0.5)])

    def epoch_batches(seed):
        loader = DataLoader(rows, global_batch_size=8, seed=seed)
        return [batch["input_ids"].tolist() for batch in loader], [batch["input_ids"].tolist() for batch in loader]

    first, second = epoch_batches(0)
    assert (first, second) == epoch_batches(0)
    assert first != second and first != epoch_batches(1)[0]
    loader = DataLoader(rows, global_batch_size=8, seed=0)
    visited = loader.order(1)[: loader.batches_per_epoch * 8].tolist()
    assert len(set(visited)) == len(visited)


def test_rank_slices_are_disjoint_and_complete(prepared):
    rows = rows_of(prepared, [("a", 1.0), ("b", 1.0)])
    loaders = [DataLoader(rows, global_batch_size=8, seed=5, rank=r, world_size=2) for r in range(2)]
    whole = DataLoader(rows, global_batch_size=8, seed=5)
    for local, global_batch in zip(zip(*loaders), whole):
        parts = [batch["input_ids"] for batch in local]
        assert parts[0].shape[0] == parts[1].shape[0] == 4
        assert np.concatenate(parts).tolist() == global_batch["input_ids"].tolist()
    indices = [set(loader.order(1)[r * 4 :: 8].tolist()) for r, loader in enumerate(loaders)]
    assert not indices[0] & indices[1]


def test_resume_from_a_data_position_continues_the_same_order(prepared):
    rows = rows_of(prepared, [("a", 1.0), ("b", 0.5)])
    reference = DataLoader(rows, global_batch_size=8, seed=2)
    expected = [batch["input_ids"].tolist() for batch in reference]
    stopped = DataLoader(rows, global_batch_size=8, seed=2)
    iterator = iter(stopped)
    for _ in range(5):
        next(iterator)
    resumed = DataLoader(rows_of(prepared, [("a", 1.0), ("b", 0.5)]), global_batch_size=8, seed=2)
    resumed.load_state_dict(stopped.state_dict())
    assert [batch["input_ids"].tolist() for batch in resumed] == expected[5:]


def test_document_masking_restarts_positions_and_ignores_boundary_labels(prepared):
    rows = rows_of(prepared, [("a", 1.0)], seq_len=64, document_masking=True)
    index = next(i for i in range(len(rows)) if len(rows.document_lengths(i)) > 2)
    lengths = rows.document_lengths(index)
    item = rows[index]
    expected_positions = np.concatenate([np.arange(n) for n in lengths]).tolist()
    assert item["position_ids"].tolist() == expected_positions
    starts = np.cumsum([0, *lengths[:-1]])
    assert (item["labels"][starts[1:]] == IGNORE_INDEX).all()
    others = np.setdiff1d(np.arange(64), starts[1:])
    assert item["labels"][others].tolist() == item["input_ids"][others].tolist()


def test_validation_rows_are_the_sources_last_rows(prepared):
    source = TokenSource(prepared[0]["a"], 16, cache_dir=prepared[1])
    train, validation = split_windows(source, 0.1, weight=1.0)
    assert train.stop == validation.start and validation.stop == source.num_rows
    assert validation.count == round(0.1 * source.num_rows)


def test_a_folder_without_an_index_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="holds no index.json.*honing prepare"):
        TokenSource(str(tmp_path / "empty"), 16, cache_dir=str(tmp_path / "cache"))


def test_one_shard_gives_the_rows_of_the_in_memory_path(tmp_path, tokenizer):
    from honing.data.text.corpus import PretrainDataset

    docs = documents(80)
    prepare_tokens([{"path": write_jsonl(tmp_path / "a.jsonl", docs)}], tokenizer, str(tmp_path / "out"), workers=1)
    source = TokenSource(str(tmp_path / "out"), 24, cache_dir=str(tmp_path / "cache"))
    shards = TokenRows([RowWindow(source, 0, source.num_rows)], document_masking=True)
    memory = PretrainDataset(tokenize_documents(docs, tokenizer, cache_dir=None), 24, document_masking=True)
    assert len(shards) == len(memory)
    for index in (0, 7, len(memory) - 1):
        expected, actual = memory[index], shards[index]
        assert expected.keys() == actual.keys() == {"input_ids", "labels", "position_ids"}
        for key in expected:
            assert expected[key].tolist() == actual[key].tolist(), key


def mapped_kib(path: str) -> int:
    """How much of the file at ``path`` is mapped into this process (``Rss`` of its mappings), in KiB."""
    total, current = 0, None
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if not fields[0].endswith(":"):
                current = fields[5] if len(fields) > 5 else None
            elif fields[0] == "Rss:" and current == path:
                total += int(fields[1])
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="reads the process's mappings (Linux)")
def test_rows_are_read_without_mapping_the_shards_into_the_process(tmp_path, tokenizer):
    # a shard just written sits in the page cache in large folios: rows read through the memory map at random
    # would map whole folios (megabytes per row) into this process, so its resident size would follow the corpus
    path = write_jsonl(tmp_path / "a.jsonl", documents(3000))
    prepare_tokens([{"path": path}], tokenizer, str(tmp_path / "out"), workers=1)
    source = TokenSource(str(tmp_path / "out"), 16, cache_dir=str(tmp_path))
    rows = TokenRows([RowWindow(source, 0, source.num_rows)])
    assert len(source.index.shards) == 1 and source.num_rows > 10_000
    everything = np.fromfile(source.paths[0], dtype=np.uint16, offset=64, count=source.num_rows * 16)
    before = mapped_kib(source.paths[0])
    for index in np.random.default_rng(0).permutation(source.num_rows)[:2000].tolist():
        assert rows[index]["input_ids"].tolist() == everything[index * 16 : index * 16 + 16].tolist()
    assert mapped_kib(source.paths[0]) == before == 0
