"""Tokenizers for pretraining: byte-level, character, BPE trained in-process, or a pretrained one."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import tokenizers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from honing.cache import atomic_write, content_hash
from honing.errors import DataError
from honing.hub import check_name_or_path, hub_load_error, is_hub_id

if TYPE_CHECKING:  # transformers takes a second to import; the data loader should not pay for it
    from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

    from honing.config.data_schema import TokenizerSection

log = logging.getLogger(__name__)

EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"
UNK_TOKEN = "<|unk|>"
TOKENIZER_KINDS = ("byte", "char", "bpe", "pretrained")
# Documents are tokenized whole, so any finite limit would only trigger transformers' length warning.
MODEL_MAX_LENGTH = 2**62


def build_tokenizer(
    kind: str,
    *,
    texts: Sequence[str] | None = None,
    vocab_size: int | None = None,
    path: str | None = None,
    trust_remote_code: bool = False,
    cache_dir: str | None = None,
) -> PreTrainedTokenizerBase:
    """Build the tokenizer of ``kind`` (byte, char, bpe or pretrained) with an eos and a pad token."""
    if kind == "byte":
        return _wrap(byte_backend())
    if kind == "char":
        return _wrap(char_backend(_require_texts(kind, texts)), unk_token=UNK_TOKEN)
    if kind == "bpe":
        return _wrap(bpe_backend(_require_texts(kind, texts), _require_bpe_vocab_size(vocab_size), cache_dir))
    if kind == "pretrained":
        return load_pretrained_tokenizer(path, trust_remote_code=trust_remote_code)
    raise DataError(f"unknown tokenizer kind {kind!r}; expected one of: {', '.join(TOKENIZER_KINDS)}")


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> str:
    """sha256 of the tokenizer's serialized backend: equal fingerprints encode text identically."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        text = backend.to_str()
        if backend.padding is not None or backend.truncation is not None:
            # State the last padded batch left (a processor pads its batch), not how text encodes: a rank that has
            # tokenized rows must get the fingerprint of one that has not, or it waits for a cache entry never made.
            clean = Tokenizer.from_str(text)
            clean.no_padding()
            clean.no_truncation()
            text = clean.to_str()
        return hashlib.sha256(text.encode("utf-8")).hexdigest()
    # A tokenizer without a Rust backend (rare in transformers 5): its vocabulary and specials stand in.
    description = {
        "class": type(tokenizer).__name__,
        "vocab": sorted(tokenizer.get_vocab().items()),
        "special": {k: str(v) for k, v in tokenizer.special_tokens_map.items()},
    }
    return hashlib.sha256(json.dumps(description, sort_keys=True).encode("utf-8")).hexdigest()


def byte_backend() -> Tokenizer:
    """A tokenizer whose ids 0..255 are the UTF-8 bytes, followed by the special tokens."""
    byte_to_char = _bytes_to_unicode()
    # BPE with no merges is a plain byte lookup; ByteLevel maps raw bytes to the printable stand-ins.
    backend = Tokenizer(models.BPE(vocab={byte_to_char[b]: b for b in range(256)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([EOS_TOKEN, PAD_TOKEN])
    return backend


def char_backend(texts: Sequence[str]) -> Tokenizer:
    """A tokenizer with one id per character seen in ``texts`` (sorted), then eos, pad and unk."""
    chars = sorted(set().union(*map(set, texts)))
    vocab = {char: index for index, char in enumerate(chars)}
    for token in (EOS_TOKEN, PAD_TOKEN, UNK_TOKEN):
        vocab[token] = len(vocab)
    # BPE with no merges and no pre-tokenizer splits text into single characters, unknown ones to unk.
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK_TOKEN))
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens([EOS_TOKEN, PAD_TOKEN, UNK_TOKEN])
    return backend


def bpe_backend(texts: Sequence[str], vocab_size: int, cache_dir: str | None) -> Tokenizer:
    """A byte-level BPE trained on ``texts`` to ``vocab_size``, cached under ``cache_dir``."""
    cache_file = None
    if cache_dir is not None:
        # The tokenizers version is in the key: another release may train different merges.
        key = content_hash(["bpe", str(vocab_size), tokenizers.__version__, *texts])
        cache_file = os.path.join(cache_dir, "tokenizers", f"bpe-{key}.json")
        if os.path.exists(cache_file):
            try:
                return Tokenizer.from_file(cache_file)
            except Exception as error:  # noqa: BLE001 - any unreadable cache entry is rebuilt
                log.warning("ignoring unreadable tokenizer cache %s (%s); retraining", cache_file, error)
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TOKEN, PAD_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer, length=len(texts))
    if cache_file is not None:
        serialized = backend.to_str().encode("utf-8")
        atomic_write(cache_file, lambda file: file.write(serialized))
    return backend


def load_pretrained_tokenizer(path: str | None, *, trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    """``AutoTokenizer.from_pretrained(path)``, checked to have an eos token and given a pad token."""
    if not path:
        raise DataError("tokenizer kind 'pretrained' needs a path (a local folder or a Hugging Face name)")
    from transformers import AutoTokenizer

    check_name_or_path(path, "model.name_or_path / tokenizer.path")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as error:
        if is_hub_id(path) and not os.path.isdir(path):  # not reachable, not on the hub, gated: say which
            raise hub_load_error("model.name_or_path / tokenizer.path", path, error) from None
        raise DataError(f"could not load a tokenizer from {path!r}: {' '.join(str(error).split())}") from None
    if tokenizer.eos_token is None:
        raise DataError(
            f"the tokenizer at {path!r} has no eos token; pretraining needs one to separate "
            "documents (set eos_token in its tokenizer_config.json)"
        )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _wrap(backend: Tokenizer, unk_token: str | None = None) -> PreTrainedTokenizerFast:
    from transformers import PreTrainedTokenizerFast

    # clean_up_tokenization_spaces would rewrite " ." to "." on decode and break the round trip.
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        bos_token=None,
        unk_token=unk_token,
        model_max_length=MODEL_MAX_LENGTH,
        clean_up_tokenization_spaces=False,
    )


def _require_texts(kind: str, texts: Sequence[str] | None) -> Sequence[str]:
    if texts is None or not any(texts):
        raise DataError(
            f"tokenizer kind {kind!r} is trained on the training documents, but none were given (got no non-empty text)"
        )
    return texts


def _require_bpe_vocab_size(vocab_size: int | None) -> int:
    minimum = 256 + 2  # every byte plus eos and pad
    if vocab_size is None or vocab_size < minimum:
        raise DataError(f"tokenizer kind 'bpe' needs vocab_size >= {minimum} (256 bytes + eos + pad), got {vocab_size}")
    return vocab_size


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's map from each byte to a printable character, the alphabet ByteLevel works in."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping = {byte: chr(byte) for byte in printable}
    # Bytes that are not printable (controls, space) get the code points after 255, in byte order.
    others = [byte for byte in range(256) if byte not in mapping]
    mapping.update({byte: chr(256 + index) for index, byte in enumerate(others)})
    return mapping


def tokenizer_kind(tokenizer: TokenizerSection, name_or_path: str | None) -> tuple[str, str | None]:
    """``tokenizer.kind`` and ``tokenizer.path`` of the run's ``tokenizer`` section with ``auto`` resolved: the
    model's own tokenizer when ``model.name_or_path`` (``name_or_path``) is set, else byte-level."""
    if tokenizer.kind != "auto":
        return tokenizer.kind, tokenizer.path or (name_or_path if tokenizer.kind == "pretrained" else None)
    if tokenizer.path or name_or_path:
        return "pretrained", tokenizer.path or name_or_path
    return "byte", None
