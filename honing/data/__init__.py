"""Data for training: tokenizers, sources, conversation formats, chat templates, packing and the loader."""

from honing.cache import default_cache_dir
from honing.data.chat.conversation import (
    TokenizedExample,
    resolve_chat_template,
    tokenize_conversation,
    tokenize_plain_text,
)
from honing.data.chat.packing import PackedDataset, best_fit_decreasing
from honing.data.chat.padding import PaddedDataset
from honing.data.collate import Collator, PadCollator, pad_collate, stack_collate
from honing.data.eval_batches import EvalBatches
from honing.data.formats import ContentItem, Conversation, Message, PlainText
from honing.data.loader import DataLoader
from honing.data.row_reader import iter_examples, load_examples
from honing.data.sources import STDLIB_PLACEHOLDER, expand_paths
from honing.data.text.corpus import PretrainDataset, TokenizedCorpus, split_documents, tokenize_documents
from honing.data.text.documents import Document, iter_text_documents, load_documents
from honing.data.tokenizer import build_tokenizer, tokenizer_fingerprint

__all__ = [
    "Collator",
    "PadCollator",
    "ContentItem",
    "Conversation",
    "Message",
    "PackedDataset",
    "PaddedDataset",
    "PlainText",
    "TokenizedExample",
    "best_fit_decreasing",
    "iter_examples",
    "load_examples",
    "pad_collate",
    "resolve_chat_template",
    "tokenize_conversation",
    "tokenize_plain_text",
    "STDLIB_PLACEHOLDER",
    "DataLoader",
    "EvalBatches",
    "Document",
    "PretrainDataset",
    "TokenizedCorpus",
    "build_tokenizer",
    "default_cache_dir",
    "expand_paths",
    "iter_text_documents",
    "load_documents",
    "split_documents",
    "stack_collate",
    "tokenize_documents",
    "tokenizer_fingerprint",
]
