"""Data for training: tokenizers, document sources, the pretraining corpus and the batch loader."""

from honing.data.cache import default_cache_dir
from honing.data.eval_batches import EvalBatches
from honing.data.loader import DataLoader, stack_collate
from honing.data.pretrain_corpus import PretrainDataset, TokenizedCorpus, split_documents, tokenize_documents
from honing.data.sources import STDLIB_PLACEHOLDER, Document, expand_paths, iter_text_documents, load_documents
from honing.data.tokenizer import build_tokenizer, tokenizer_fingerprint

__all__ = [
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
