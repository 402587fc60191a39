"""Text read in bounded pieces: documents split on a separator exactly as ``str.split`` on the whole text, long
documents cut at seams (same ids for the byte tokenizer always, for byte-level BPE at newline and space seams),
byte ranges that together give the whole file, and reads that never exceed their bounds."""

from __future__ import annotations

import io
import random
import sysconfig
from pathlib import Path

import pytest

from honing.data.text import pieces as text_pieces
from honing.data.text.pieces import NotUTF8Error, cut_position, iter_text_parts, split_text
from honing.data.tokenizer import bpe_backend
from honing.errors import DataError

SEPARATORS = [None, "\n\n", "\n", "ab", "aa", "é", "\n\n\n"]
ALPHABET = ["a", "b", " ", "\n", "\n\n", "é", "x y", "  ", "\t", "ab\n", "𝄞", "z."]


def documents_of(parts) -> list[str]:
    """The documents the parts make: text joined until a part that ends its document."""
    documents, current, open_document = [], [], False
    for part in parts:
        assert part.starts_document != open_document  # a continuation only ever follows an open document
        current = [] if part.starts_document else current
        current.append(part.text)
        open_document = not part.ends_document
        if part.ends_document:
            documents.append("".join(current))
    assert not open_document
    return documents


def random_texts(count: int, seed: int = 0):
    rng = random.Random(seed)
    for _ in range(count):
        text = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 60)))
        yield text, rng.choice(SEPARATORS), rng


def test_split_text_is_str_split_without_empty_documents():
    assert split_text("a\n\n\nb\n\n\n\nc\n\n", "\n\n") == ["a", "\nb", "c"]
    assert split_text("whole\n\nfile", None) == ["whole\n\nfile"] and split_text("", None) == []
    with pytest.raises(DataError, match="text_document_separator"):
        split_text("a", "")


def test_streamed_documents_equal_splitting_the_whole_text(monkeypatch):
    # reads of 1..9 bytes and pieces of 4..12 bytes: separators straddle reads, documents span many pieces
    for text, separator, rng in random_texts(1500):
        monkeypatch.setattr(text_pieces, "READ_BYTES", rng.randint(1, 9))
        piece_bytes = rng.randint(4, 12)
        data = text.encode()
        parts = list(iter_text_parts(io.BytesIO(data), separator=separator, piece_bytes=piece_bytes))
        assert documents_of(parts) == split_text(text, separator), (text, separator)
        assert all(len(part.text.encode()) <= piece_bytes for part in parts)
        whole = list(iter_text_parts(io.BytesIO(data), separator=separator, piece_bytes=None))
        assert [part.text for part in whole] == split_text(text, separator)


def test_byte_ranges_read_apart_give_the_whole_files_documents(monkeypatch):
    monkeypatch.setattr(text_pieces, "READ_BYTES", 5)
    for text, separator, rng in random_texts(1500, seed=1):
        data, step = text.encode(), rng.randint(1, 20)
        cuts = [(0, True)]
        for nominal in range(step, len(data), step):
            position, starts = cut_position(io.BytesIO(data), nominal, len(data), separator)
            assert position >= cuts[-1][0]  # cuts never go backwards
            if position > cuts[-1][0]:
                cuts.append((position, starts))
        if cuts[-1][0] < len(data):
            cuts.append((len(data), True))
        parts = []
        for (start, starts), (stop, ends) in zip(cuts, cuts[1:]):
            file = io.BytesIO(data)
            file.seek(start)
            parts += iter_text_parts(
                file, separator=separator, limit=stop - start, starts_document=starts, ends_document=ends, piece_bytes=7
            )
        assert documents_of(parts) == split_text(text, separator), (text, separator, step)


class RecordingFile(io.BytesIO):
    """A file that remembers the largest read asked of it."""

    largest = 0

    def read(self, size=-1):
        assert size is not None and size >= 0, "an unbounded read"
        self.largest = max(self.largest, size)
        return super().read(size)


def test_the_reader_never_reads_or_holds_more_than_its_bounds(monkeypatch):
    monkeypatch.setattr(text_pieces, "READ_BYTES", 64)
    one_document = ("word " * 20 + "\n") * 2000  # 212 KB, no separator in it
    file = RecordingFile(one_document.encode())
    parts = list(iter_text_parts(file, separator="\n\n", piece_bytes=256))
    assert file.largest == 64 and max(len(part.text) for part in parts) <= 256
    assert len(parts) >= 800 and documents_of(parts) == [one_document]
    assert sum(part.consumed for part in parts) == len(one_document)


def test_bpe_ids_across_seams_equal_the_whole_texts():
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts = [path.read_text(encoding="utf-8") for path in sorted((stdlib / "json").glob("*.py"))]
    tokenizer = bpe_backend(texts, 600, None)  # GPT-2's byte-level pre-tokenizer regex, as honing's bpe has
    text = "\n\n".join(texts) + "  wörds  with   spaces é日本語 \n x\n\ty\n" * 20
    whole = tokenizer.encode(text, add_special_tokens=False).ids
    parts = list(iter_text_parts(io.BytesIO(text.encode()), separator=None, piece_bytes=2048))
    assert len(parts) > 20 and not any(part.ends_document for part in parts[:-1])
    assert [i for part in parts for i in tokenizer.encode(part.text, add_special_tokens=False).ids] == whole


def test_invalid_utf8_names_the_file_and_byte():
    data = b"good text\n\nmore" + b"\xff" + b" rest"
    with pytest.raises(NotUTF8Error, match=r"corpus.txt: not valid UTF-8 text \(byte 115\)"):
        list(iter_text_parts(io.BytesIO(data), separator="\n\n", where="corpus.txt", offset=100))
    with pytest.raises(DataError, match=">= 4 bytes"):
        list(iter_text_parts(io.BytesIO(data), separator=None, piece_bytes=3))
