"""``honing prepare``: tokenize sources into memory-mapped token shards with several processes, resumably.

The run is keyed by a content hash of the inputs (each file's path, size and content digest or S3 ETag), the tokenizer's
fingerprint and the settings. The same key as a finished folder's ``index.json``: nothing to do. Otherwise each
shard missing (or damaged) is written by a worker under a temporary name and published whole; shards already
published by an interrupted run with the same key are kept. ``index.json`` is written last.
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from honing import storage
from honing.cache import content_hash
from honing.data.progress import WorkProgress
from honing.data.text.pieces import NotUTF8Error, TextPart
from honing.data.text.prepare_inputs import Plan, iter_piece_texts, plan_sources
from honing.data.text.token_shards import (
    INDEX_FILE,
    TEMP_PREFIX,
    TOKENIZER_DIR,
    ShardInfo,
    ShardWriter,
    TokenIndex,
    publish_file,
    read_index,
    shard_complete,
    shard_name,
    token_dtype,
    write_index,
)
from honing.data.tokenizer import tokenizer_fingerprint
from honing.data.worker_pool import Report, run_tasks
from honing.errors import DataError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

# Bump when the shard layout or the tokenization rule changes, so old folders are prepared again.
PREPARE_VERSION = "prepare-v2"  # v2: text files in byte ranges and 64 KiB pieces, split on a separator
DEFAULT_SHARD_BYTES = 256 * 2**20  # of input text: a few minutes of one worker, a resume loses at most that
ENCODE_BATCH_BYTES = 2**18  # text per encode call: the tokenizer's Encodings take ~100x the bytes of text


@dataclass
class PrepareResult:
    """What a prepare did: the index, and which shards it wrote (none when the folder was up to date)."""

    index: TokenIndex
    written: list[int]
    up_to_date: bool


def default_workers() -> int:
    """min(2, CPUs): tokenizing is CPU bound, one process per core."""
    return max(1, min(2, os.cpu_count() or 1))


def prepare_tokens(
    sources: Sequence[Any],
    tokenizer: PreTrainedTokenizerBase,
    out_dir: str,
    *,
    workers: int | None = None,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    separator: str | None = None,
    progress: bool = False,
) -> PrepareResult:
    """Tokenize ``sources`` into shards under ``out_dir`` (a local path or fsspec URL); resumable, a no-op when
    the folder already holds these inputs tokenized by this tokenizer. Text files' documents split on
    ``separator`` (None: each file is one document)."""
    workers = default_workers() if workers is None else workers
    if workers < 1:
        raise DataError(f"--workers must be >= 1, got {workers}")
    if shard_bytes < 1:
        raise DataError(f"shard size must be >= 1 byte, got {shard_bytes}")
    eos_id = tokenizer.eos_token_id
    if eos_id is None:
        raise DataError("the tokenizer has no eos token; pretraining needs one to separate documents")
    vocab_size = len(tokenizer)
    dtype = token_dtype(vocab_size)
    plan = plan_sources(sources, shard_bytes, separator=separator)
    fingerprint = tokenizer_fingerprint(tokenizer)
    key = content_hash(
        [PREPARE_VERSION, fingerprint, str(eos_id), dtype.name, str(shard_bytes), str(len(plan.shards)), *plan.identity]
    )
    finished = _finished_index(out_dir, key)
    if finished is not None:
        log.info(
            "%s is up to date (%d tokens in %d shards); nothing to do",
            out_dir,
            finished.num_tokens,
            len(finished.shards),
        )
        return PrepareResult(finished, [], True)
    _start(out_dir, key)
    paths = [storage.join(out_dir, shard_name(i)) for i in range(len(plan.shards))]
    todo = [i for i, path in enumerate(paths) if shard_complete(path) is None]
    if len(todo) < len(paths):
        log.info("resuming: %d of %d shards are already written", len(paths) - len(todo), len(paths))
    tasks = [(plan.shards[i], paths[i], dtype.str, eos_id) for i in todo]
    total = sum(piece.size for i in todo for piece in plan.shards[i])
    run_tasks(
        _write_shard,
        tasks,
        workers=workers,
        progress=WorkProgress(total, progress, label="tokenizing", unit="bytes"),
        resume_hint="the shards it finished are kept: run `honing prepare` again to write the rest",
        setup=partial(_load_encoder, _tokenizer_payload(tokenizer)),
    )
    index = _build_index(plan, paths, key, dtype.name, vocab_size, eos_id, fingerprint, sources)
    _save_tokenizer(tokenizer, out_dir)
    write_index(out_dir, index)
    _remove_leftovers(out_dir)
    log.info("wrote %d tokens in %d shards to %s", index.num_tokens, len(index.shards), out_dir)
    return PrepareResult(index, todo, False)


def _finished_index(out_dir: str, key: str) -> TokenIndex | None:
    if not storage.exists(storage.join(out_dir, INDEX_FILE)):
        return None
    try:
        index = read_index(out_dir)
    except DataError:
        return None
    if index.key != key:
        return None
    if any(shard_complete(storage.join(out_dir, shard.file)) is None for shard in index.shards):
        return None
    return index


def _start(out_dir: str, key: str) -> None:
    """Mark the folder as being prepared for ``key``; shards of a different key (other inputs) are removed."""
    storage.makedirs(out_dir)
    marker = storage.join(out_dir, "prepare.key")
    previous = storage.read_bytes(marker).decode() if storage.exists(marker) else None
    stale = [name for name in storage.listdir(out_dir) if name.startswith("shard-") or name == INDEX_FILE]
    if previous != key and stale:
        log.warning("%s holds shards of other inputs or settings; preparing it again from the start", out_dir)
        for name in stale:
            storage.rm(storage.join(out_dir, name))
    elif storage.exists(storage.join(out_dir, INDEX_FILE)):
        storage.rm(storage.join(out_dir, INDEX_FILE))  # a damaged shard: the index is rewritten once it is redone
    storage.write_bytes(marker, key.encode())


# ---- worker side --------------------------------------------------------------------------------------------

_worker: dict[str, Any] = {}


def _tokenizer_payload(tokenizer: PreTrainedTokenizerBase) -> bytes:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    # The Rust backend's JSON is all a worker needs and starts fast; a Python-only tokenizer goes pickled.
    return b"json:" + backend.to_str().encode() if backend is not None else b"pickle:" + pickle.dumps(tokenizer)


def _load_encoder(payload: bytes) -> None:
    kind, data = payload.split(b":", 1)
    if kind == b"json":
        from tokenizers import Tokenizer

        backend = Tokenizer.from_str(data.decode())
        _worker["encode"] = lambda texts: [e.ids for e in backend.encode_batch_fast(texts, add_special_tokens=False)]
    else:
        tokenizer = pickle.loads(data)  # noqa: S301 - our own tokenizer, pickled by the parent a moment ago
        _worker["encode"] = lambda texts: tokenizer(texts, add_special_tokens=False, return_attention_mask=False)[
            "input_ids"
        ]


def _write_shard(task: tuple, report: Report) -> None:
    """Tokenize one shard's pieces, documents each followed by eos, into its file. A text piece found not to be
    UTF-8 is left out whole, with a warning."""
    pieces, path, dtype, eos_id = task
    encode = _worker["encode"]
    writer = ShardWriter(path, dtype)
    try:
        for piece in pieces:
            mark = writer.mark()
            parts: list[TextPart] = []
            batch_bytes = reported = pending = 0
            try:
                for part in iter_piece_texts(piece):
                    parts.append(part)
                    batch_bytes += len(part.text)
                    pending += part.consumed
                    if batch_bytes >= ENCODE_BATCH_BYTES:
                        _encode_into(writer, encode, parts, eos_id)
                        report(pending)
                        parts, batch_bytes, reported, pending = [], 0, reported + pending, 0
                _encode_into(writer, encode, parts, eos_id)
            except NotUTF8Error as error:
                writer.rollback(mark)
                log.warning("skipped %s; convert it to UTF-8 or leave it out of the sources", error)
            report(max(piece.size - reported, 0))  # what the rows did not account for (Parquet, streams)
        writer.publish()
    except BaseException:
        writer.discard()
        raise


def _encode_into(
    writer: ShardWriter, encode: Callable[[list[str]], list[list[int]]], parts: list[TextPart], eos: int
) -> None:
    """Tokenize ``parts`` in one call and append them: eos after each part that ends its document."""
    if not parts:
        return
    tokens: list[int] = []
    starts: list[int] = []
    for part, ids in zip(parts, encode([part.text for part in parts])):
        if part.starts_document:
            starts.append(len(tokens))
        tokens += ids
        if part.ends_document:
            tokens.append(eos)
    writer.add_tokens(np.asarray(tokens, dtype=np.int64), starts)


# ---- finishing ----------------------------------------------------------------------------------------------


def _build_index(
    plan: Plan,
    paths: list[str],
    key: str,
    dtype: str,
    vocab_size: int,
    eos_id: int,
    fingerprint: str,
    sources: Sequence[Any],
) -> TokenIndex:
    shards: list[ShardInfo] = []
    for path, source in zip(paths, plan.shard_sources):
        info = shard_complete(path)
        if info is None:
            raise DataError(f"{path}: missing or damaged after it was written; run `honing prepare` again")
        info.source = source
        shards.append(info)
    names = [getattr(source, "path", None) or source["path"] for source in sources]
    return TokenIndex(key, dtype, vocab_size, int(eos_id), fingerprint, names, shards)


def _save_tokenizer(tokenizer: PreTrainedTokenizerBase, out_dir: str) -> None:
    """The tokenizer beside the shards, so training with a trained (bpe, char) tokenizer reads the same one."""
    with tempfile.TemporaryDirectory() as folder:
        tokenizer.save_pretrained(folder)
        for name in sorted(os.listdir(folder)):
            fd, temp = tempfile.mkstemp(prefix=TEMP_PREFIX)
            os.close(fd)
            shutil.copyfile(os.path.join(folder, name), temp)
            publish_file(temp, storage.join(out_dir, TOKENIZER_DIR, name))


def _remove_leftovers(out_dir: str) -> None:
    """Temporary files of interrupted runs (never read: only published names are)."""
    for name in storage.listdir(out_dir):
        if name.startswith(TEMP_PREFIX):
            storage.rm(storage.join(out_dir, name))
