"""The tokenizer of a GGUF file (``tokenizer.ggml.*``): its tokens and their types, merges, special token ids and
chat template (without transformers' ``{% generation %}`` tags), written as llama.cpp's converter writes them, so
that llama.cpp splits text into the same ids as the Hugging Face tokenizer the model was trained with.

Two kinds of ``tokenizer.json`` are written:

- byte-level BPE (Llama 3, Qwen2, GPT-2, honing's byte and bpe tokenizers): ``tokenizer.ggml.model = gpt2``,
  with the pre-tokenizer llama.cpp names whose split pattern is the tokenizer's own (:data:`PRE_TOKENIZERS`);
- SentencePiece-style BPE with byte fallback (Llama 2, Mistral): ``tokenizer.ggml.model = llama``, read by the
  gguf package's ``LlamaHfVocab``.

A byte-level BPE whose split pattern llama.cpp does not know is refused: llama.cpp would cut text elsewhere and
the model would see ids it was not trained on."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from honing.data.chat.templates import strip_generation_markers
from honing.errors import ConfigError

if TYPE_CHECKING:
    from gguf import GGUFWriter

#: Llama 3's split pattern (its tokenizer.json's Split step; llama.cpp's ``llama-bpe``)
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
#: Qwen2's pattern differs from Llama 3's in one place: digits one at a time
QWEN2_SPLIT = LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")
#: a byte-level tokenizer's split pattern → the llama.cpp pre-tokenizer (``tokenizer.ggml.pre``) that splits alike
PRE_TOKENIZERS = {LLAMA3_SPLIT: "llama-bpe", QWEN2_SPLIT: "qwen2"}


def read_tokenizer_json(folder: str) -> dict[str, Any]:
    """``folder/tokenizer.json`` (a fast tokenizer: what honing's exports save)."""
    path = os.path.join(folder, "tokenizer.json")
    if not os.path.isfile(path):
        raise ConfigError(
            f"--gguf: {folder} has no tokenizer.json; the GGUF file carries the tokenizer, so one is needed"
        )
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def is_byte_level_bpe(tokenizer_json: dict[str, Any]) -> bool:
    """A GPT-2-style BPE over byte stand-ins (no byte fallback)."""
    model = tokenizer_json.get("model") or {}
    decoder = tokenizer_json.get("decoder") or {}
    return model.get("type") == "BPE" and not model.get("byte_fallback") and decoder.get("type") == "ByteLevel"


def pre_tokenizer_name(tokenizer_json: dict[str, Any], path: str) -> str:
    """The llama.cpp pre-tokenizer that splits text as this byte-level tokenizer does."""
    if not (tokenizer_json.get("model") or {}).get("merges"):
        return "default"  # no merges: every byte is its own token, however the text is split first
    pre = tokenizer_json.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    if len(steps) == 1 and steps[0].get("type") == "ByteLevel" and steps[0].get("use_regex", True):
        return "gpt-2"  # ByteLevel's own pattern is GPT-2's
    patterns = [step.get("pattern", {}).get("Regex") for step in steps if step.get("type") == "Split"]
    if len(patterns) == 1 and patterns[0] in PRE_TOKENIZERS:
        return PRE_TOKENIZERS[patterns[0]]
    raise ConfigError(
        f"--gguf: {path}'s pre-tokenizer splits text in a way llama.cpp does not name (GPT-2's, Llama 3's and "
        "Qwen2's are known); convert it with llama.cpp's convert_hf_to_gguf.py"
    )


def add_vocabulary(writer: GGUFWriter, gguf: ModuleType, folder: str, vocab_size: int) -> None:
    """Write the tokenizer of ``folder`` for a model of ``vocab_size`` embedding rows."""
    tokenizer_json = read_tokenizer_json(folder)
    path = os.path.join(folder, "tokenizer.json")
    if is_byte_level_bpe(tokenizer_json):
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(pre_tokenizer_name(tokenizer_json, path))
        tokens, types = byte_level_tokens(gguf, folder, vocab_size)
        writer.add_token_list(tokens)
        writer.add_token_types(types)
        merges = True
    elif (tokenizer_json.get("model") or {}).get("byte_fallback"):
        vocab = gguf.LlamaHfVocab(Path(folder))
        ranks = merge_ranks(tokenizer_json)
        tokens, scores, types = [], [], []
        for text, score, kind in vocab.all_tokens():
            tokens.append(text)
            # LlamaHfVocab scores every token alike; llama.cpp merges the pair of highest score first, so a
            # piece scores minus the rank of the merge that makes it and merges happen in the tokenizer's order
            normal = kind == gguf.TokenType.NORMAL
            scores.append(-float(ranks.get(text.decode("utf-8"), 0)) if normal else score)
            types.append(kind)
        for index in range(len(tokens), vocab_size):  # embedding rows past the tokenizer's last id
            tokens.append(f"[PAD{index}]".encode())
            scores.append(-1000.0)
            types.append(gguf.TokenType.UNUSED)
        writer.add_tokenizer_model("llama")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(tokens)
        writer.add_token_scores(scores)
        writer.add_token_types(types)
        merges = False
    else:
        kind = (tokenizer_json.get("model") or {}).get("type")
        raise ConfigError(
            f"--gguf: {path} is a {kind} tokenizer; honing writes byte-level BPE (Llama 3, Qwen2) and SentencePiece-"
            "style BPE (Llama 2, Mistral) tokenizers"
        )
    special = gguf.SpecialVocab(folder, load_merges=merges, n_vocab=vocab_size)
    if isinstance(special.chat_template, str):
        # transformers' {% generation %} tags (assistant-only training masks) are unknown to llama.cpp's template
        # engine; without them the template renders the same text
        special.chat_template = strip_generation_markers(special.chat_template)
    special.add_to_gguf(writer, quiet=True)


def merge_ranks(tokenizer_json: dict[str, Any]) -> dict[str, int]:
    """Each piece a BPE merge makes → the rank of the first merge that makes it (0: merged first)."""
    ranks: dict[str, int] = {}
    for rank, merge in enumerate((tokenizer_json.get("model") or {}).get("merges") or []):
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        ranks.setdefault(left + right, rank)
    return ranks


def byte_level_tokens(gguf: ModuleType, folder: str, vocab_size: int) -> tuple[list[str], list[int]]:
    """Every id's token text (byte stand-ins, as in the tokenizer's vocabulary) and type: added special tokens are
    CONTROL, other added tokens USER_DEFINED, ids no token has (embedding rows past the vocabulary) UNUSED."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    by_id = {index: token for token, index in tokenizer.get_vocab().items()}
    if len(by_id) > vocab_size:
        raise ConfigError(
            f"--gguf: {folder}'s tokenizer has {len(by_id)} tokens but the model only {vocab_size} embedding rows"
        )
    added = tokenizer.added_tokens_decoder
    tokens, types = [], []
    for index in range(vocab_size):
        if index not in by_id:
            tokens.append(f"[PAD{index}]")
            types.append(gguf.TokenType.UNUSED)
        elif index in added:
            tokens.append(by_id[index])
            types.append(gguf.TokenType.CONTROL if added[index].special else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(by_id[index])
            types.append(gguf.TokenType.NORMAL)
    return tokens, types
