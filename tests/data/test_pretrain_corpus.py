"""Tests for honing/data/text/corpus.py: splits, tokenization with eos, the cache, rows of seq_len."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from honing.data.text import corpus as pretrain_corpus
from honing.data.text.corpus import (
    PretrainDataset,
    TokenizedCorpus,
    default_cache_dir,
    split_documents,
    tokenize_documents,
)
from honing.data.tokenizer import build_tokenizer
from honing.errors import DataError

DOCS = ["abc", "hello", "é", "xy"]  # byte tokens: 3, 5, 2 (é is two bytes), 2; plus one eos each


@pytest.fixture(scope="module")
def byte_tokenizer():
    return build_tokenizer("byte")


def test_split_is_deterministic_whole_documents_in_order():
    docs = [f"doc {i}" for i in range(20)]
    train, validation = split_documents(docs, 0.25, seed=0)
    assert len(validation) == 5 and len(train) == 15
    assert sorted(train + validation, key=docs.index) == docs  # a partition of whole documents
    assert train == sorted(train, key=docs.index) and validation == sorted(validation, key=docs.index)
    assert split_documents(docs, 0.25, seed=0) == (train, validation)
    assert split_documents(docs, 0.25, seed=1) != (train, validation)


def test_split_edge_cases():
    assert split_documents(["a", "b"], 0.01, seed=0)[1] != []  # at least one validation document
    assert len(split_documents(["a", "b", "c"], 0.99, seed=0)[0]) == 1  # and at least one training one
    assert split_documents(["a"], 0.5, seed=0) == (["a"], [])
    assert split_documents(["a", "b"], 0.0, seed=0) == (["a", "b"], [])
    for bad in (1.0, -0.1, 1.5):
        with pytest.raises(DataError, match=f"validation fraction must be in \\[0, 1\\), got {bad}"):
            split_documents(["a", "b"], bad, seed=0)


def test_tokenize_appends_eos_after_each_document(byte_tokenizer):
    corpus = tokenize_documents(DOCS, byte_tokenizer, cache_dir=None)
    eos = byte_tokenizer.eos_token_id
    expected = [b for doc in DOCS for b in [*doc.encode("utf-8"), eos]]
    assert corpus.tokens.dtype == np.uint32 and corpus.tokens.tolist() == expected
    assert corpus.doc_starts.dtype == np.int64 and corpus.doc_starts.tolist() == [0, 4, 10, 13]
    assert corpus.num_documents == 4


def test_tokenize_matches_tokenizer_call_for_bpe():
    texts = ["the cat sat on the mat. " * 30, "the dog ate the hat! " * 30]
    tok = build_tokenizer("bpe", texts=texts, vocab_size=300)
    corpus = tokenize_documents(texts + ["<|endoftext|> in text"], tok, cache_dir=None)
    expected = []
    for text in texts + ["<|endoftext|> in text"]:
        expected += tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert corpus.tokens.tolist() == expected


def test_cache_hit_does_not_tokenize(byte_tokenizer, tmp_path, monkeypatch):
    first = tokenize_documents(DOCS, byte_tokenizer, cache_dir=str(tmp_path))
    assert len(list((tmp_path / "corpus").glob("*.npz"))) == 1
    assert not list((tmp_path / "corpus").glob(".tmp-*"))  # the temp file was renamed into place

    def no_tokenizing(*args, **kwargs):
        raise AssertionError("tokenized again despite the cache")

    monkeypatch.setattr(pretrain_corpus, "_encode_batch", no_tokenizing)
    second = tokenize_documents(DOCS, byte_tokenizer, cache_dir=str(tmp_path))
    np.testing.assert_array_equal(second.tokens, first.tokens)
    np.testing.assert_array_equal(second.doc_starts, first.doc_starts)
    with pytest.raises(AssertionError, match="tokenized again"):  # other text is another key
        tokenize_documents(DOCS + ["new"], byte_tokenizer, cache_dir=str(tmp_path))
    with pytest.raises(AssertionError, match="tokenized again"):  # another tokenizer is another key
        tokenize_documents(DOCS, build_tokenizer("char", texts=DOCS), cache_dir=str(tmp_path))


def test_corrupt_cache_is_rebuilt_with_a_warning(byte_tokenizer, tmp_path, caplog):
    first = tokenize_documents(DOCS, byte_tokenizer, cache_dir=str(tmp_path))
    (cache_file,) = (tmp_path / "corpus").glob("*.npz")
    cache_file.write_bytes(cache_file.read_bytes()[:40])  # a truncated write
    rebuilt = tokenize_documents(DOCS, byte_tokenizer, cache_dir=str(tmp_path))
    assert rebuilt.tokens.tolist() == first.tokens.tolist()
    assert "ignoring unreadable tokenized-corpus cache" in caplog.text
    with np.load(cache_file) as data:  # and the good entry was written back
        assert data["tokens"].tolist() == first.tokens.tolist()


def test_default_cache_dir(monkeypatch):
    monkeypatch.setenv("HONING_CACHE_DIR", "/somewhere/else")
    assert default_cache_dir() == "/somewhere/else"
    monkeypatch.delenv("HONING_CACHE_DIR")
    assert default_cache_dir().endswith("/.cache/honing")


def corpus_of(lengths):
    """A corpus whose documents have these token counts (token values count up from 0)."""
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return TokenizedCorpus(tokens=np.arange(sum(lengths), dtype=np.uint32), doc_starts=starts)


def test_dataset_rows_labels_and_dropped_tail():
    dataset = PretrainDataset(corpus_of([3, 6, 2, 4]), seq_len=4)  # 15 tokens → 3 rows, 3 dropped
    assert len(dataset) == 3 and dataset.num_tokens == 12
    item = dataset[1]
    assert item["input_ids"].dtype == torch.int64 and item["input_ids"].tolist() == [4, 5, 6, 7]
    assert torch.equal(item["labels"], item["input_ids"])
    assert dataset[-1]["input_ids"].tolist() == [8, 9, 10, 11]
    with pytest.raises(IndexError):
        dataset[3]


def test_document_lengths_keep_boundaries():
    dataset = PretrainDataset(corpus_of([3, 6, 2, 4]), seq_len=4)  # documents: [0,3) [3,9) [9,11) [11,15)
    assert [dataset.document_lengths(i) for i in range(3)] == [[3, 1], [4], [1, 2, 1]]
    assert PretrainDataset(corpus_of([4, 4]), seq_len=4).document_lengths(1) == [4]


def test_dataset_end_to_end_from_text(byte_tokenizer):
    corpus = tokenize_documents(DOCS, byte_tokenizer, cache_dir=None)
    dataset = PretrainDataset(corpus, seq_len=8)  # 16 tokens → 2 rows
    eos = byte_tokenizer.eos_token_id
    assert dataset[0]["input_ids"].tolist() == [*b"abc", eos, *b"hell"]
    assert dataset.document_lengths(0) == [4, 4] and dataset.document_lengths(1) == [2, 3, 3]


def test_corpus_shorter_than_a_row_is_an_error():
    with pytest.raises(DataError, match="the corpus has 5 tokens, fewer than one row of seq_len=8"):
        PretrainDataset(corpus_of([5]), seq_len=8)
