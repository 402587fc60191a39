"""Tests for honing/data/tokenizer.py: round trips, special tokens, save/load, BPE cache."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer
from transformers import AutoTokenizer

from honing.data import tokenizer as tokenizer_module
from honing.data.tokenizer import EOS_TOKEN, PAD_TOKEN, build_tokenizer, tokenizer_fingerprint
from honing.errors import DataError

UNICODE = "héllo  wörld ✓ 🎉\n\t x . , ' s\x00 ünïcödé — 中文 \r\n"
TEXTS = [
    "the quick brown fox jumps over the lazy dog\n" * 20,
    "pack my box with five dozen liquor jugs. " * 20,
    "Sphinx of black quartz, judge my vow!\n" * 20,
]


def ids_of(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_byte_ids_are_utf8_bytes_and_round_trip():
    tok = build_tokenizer("byte")
    assert ids_of(tok, UNICODE) == list(UNICODE.encode("utf-8"))
    assert tok.decode(tok.encode(UNICODE)) == UNICODE  # encode adds no special tokens by default
    assert len(tok) == 258
    assert (tok.eos_token, tok.eos_token_id, tok.pad_token, tok.pad_token_id) == (EOS_TOKEN, 256, PAD_TOKEN, 257)
    assert tok.bos_token is None
    assert tok.model_max_length >= 2**40


def test_char_vocab_is_sorted_characters_then_specials():
    tok = build_tokenizer("char", texts=["hello", "world"])
    chars = sorted(set("helloworld"))
    assert [tok.convert_tokens_to_ids(c) for c in chars] == list(range(len(chars)))
    assert tok.eos_token_id == len(chars) and tok.pad_token_id == len(chars) + 1
    assert ids_of(tok, "hello world") == [chars.index(c) if c != " " else tok.unk_token_id for c in "hello world"]
    assert tok.decode(ids_of(tok, "lower\nhold")) == "lower<|unk|>hold"  # one unk per unseen character
    assert tok.decode(ids_of(tok, "hold owl")) == "hold<|unk|>owl"
    assert build_tokenizer("char", texts=["world", "hello"]).get_vocab() == tok.get_vocab()


def test_char_round_trips_text_it_was_built_from():
    tok = build_tokenizer("char", texts=[UNICODE])
    assert tok.decode(ids_of(tok, UNICODE)) == UNICODE
    assert len(ids_of(tok, UNICODE)) == len(UNICODE)


def test_bpe_trains_deterministically_and_round_trips_any_text(tmp_path):
    first = build_tokenizer("bpe", texts=TEXTS, vocab_size=300)
    second = build_tokenizer("bpe", texts=TEXTS, vocab_size=300)
    assert tokenizer_fingerprint(first) == tokenizer_fingerprint(second)
    assert len(first) == 300
    assert len(ids_of(first, TEXTS[0])) < 0.6 * len(TEXTS[0])  # 42 merges already halve the sample
    assert first.decode(ids_of(first, UNICODE)) == UNICODE  # byte-level: nothing is unknown
    assert (first.eos_token, first.pad_token, first.bos_token) == (EOS_TOKEN, PAD_TOKEN, None)


def test_bpe_cache_second_call_does_not_train(tmp_path, monkeypatch):
    trained = build_tokenizer("bpe", texts=TEXTS, vocab_size=300, cache_dir=str(tmp_path))
    assert len(list((tmp_path / "tokenizers").glob("bpe-*.json"))) == 1

    def no_training(*args, **kwargs):
        raise AssertionError("trained again despite the cache")

    monkeypatch.setattr(Tokenizer, "train_from_iterator", no_training)
    cached = build_tokenizer("bpe", texts=TEXTS, vocab_size=300, cache_dir=str(tmp_path))
    assert tokenizer_fingerprint(cached) == tokenizer_fingerprint(trained)
    with pytest.raises(AssertionError, match="trained again"):  # another vocab size is another key
        build_tokenizer("bpe", texts=TEXTS, vocab_size=301, cache_dir=str(tmp_path))


def test_bpe_corrupt_cache_is_retrained(tmp_path, caplog):
    build_tokenizer("bpe", texts=TEXTS, vocab_size=300, cache_dir=str(tmp_path))
    (cache_file,) = (tmp_path / "tokenizers").glob("bpe-*.json")
    cache_file.write_text("{not json")
    tok = build_tokenizer("bpe", texts=TEXTS, vocab_size=300, cache_dir=str(tmp_path))
    assert len(tok) == 300
    assert "ignoring unreadable tokenizer cache" in caplog.text
    assert Tokenizer.from_file(str(cache_file)).get_vocab_size() == 300  # rewritten


@pytest.mark.parametrize("kind", ["byte", "char", "bpe"])
def test_save_pretrained_round_trip(kind, tmp_path):
    tok = build_tokenizer(kind, texts=TEXTS + [UNICODE], vocab_size=300)
    tok.save_pretrained(tmp_path / "tok")
    loaded = AutoTokenizer.from_pretrained(tmp_path / "tok")
    sample = TEXTS[1] + UNICODE + EOS_TOKEN
    assert ids_of(loaded, sample) == ids_of(tok, sample)
    assert loaded.decode(ids_of(loaded, sample)) == sample
    assert (loaded.eos_token_id, loaded.pad_token_id, loaded.bos_token) == (tok.eos_token_id, tok.pad_token_id, None)
    assert tokenizer_fingerprint(loaded) == tokenizer_fingerprint(tok)


def test_pretrained_loads_folder_and_pads_with_eos(tmp_path):
    from transformers import PreTrainedTokenizerFast

    backend = tokenizer_module.byte_backend()
    no_pad = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=EOS_TOKEN)
    no_pad.save_pretrained(tmp_path / "no_pad")
    tok = build_tokenizer("pretrained", path=str(tmp_path / "no_pad"))
    assert tok.pad_token == EOS_TOKEN and tok.pad_token_id == tok.eos_token_id == 256


def test_pretrained_without_eos_is_an_error(tmp_path):
    from transformers import PreTrainedTokenizerFast

    PreTrainedTokenizerFast(tokenizer_object=tokenizer_module.byte_backend()).save_pretrained(tmp_path / "no_eos")
    with pytest.raises(DataError, match="no_eos.*no eos token"):
        build_tokenizer("pretrained", path=str(tmp_path / "no_eos"))


def test_argument_errors():
    with pytest.raises(DataError, match="unknown tokenizer kind 'wordpiece'; expected one of: byte, char, bpe"):
        build_tokenizer("wordpiece")
    with pytest.raises(DataError, match="'char' is trained on the training documents"):
        build_tokenizer("char", texts=[])
    with pytest.raises(DataError, match="vocab_size >= 258.*got 100"):
        build_tokenizer("bpe", texts=TEXTS, vocab_size=100)
    with pytest.raises(DataError, match="needs a path"):
        build_tokenizer("pretrained")


def test_fingerprint_distinguishes_tokenizers():
    byte = build_tokenizer("byte")
    assert tokenizer_fingerprint(byte) == tokenizer_fingerprint(build_tokenizer("byte"))
    assert tokenizer_fingerprint(byte) != tokenizer_fingerprint(build_tokenizer("char", texts=["ab"]))
    assert len(tokenizer_fingerprint(byte)) == 64
