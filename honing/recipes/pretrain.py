"""Pretraining: plain text in, next-token loss on every token."""

from __future__ import annotations

from typing import Any

import numpy as np

from honing.data.collate import stack_collate
from honing.data.eval_batches import EvalBatches
from honing.data.loader import DataLoader
from honing.data.pretrain_corpus import PretrainDataset, default_cache_dir, split_documents, tokenize_documents
from honing.data.pretrain_text import load_documents
from honing.data.report import DataReport
from honing.data.tokenizer import build_tokenizer
from honing.distributed import get_rank, get_world_size
from honing.recipes.base import Recipe


class PretrainRecipe(Recipe):
    """Tokenize documents, concatenate them with an end-of-document token, cut rows of ``seq_len``."""

    def cache_dir(self) -> str:
        """Where tokenized corpora and trained tokenizers are cached."""
        return self.config.data.cache_dir or default_cache_dir()

    def documents(self) -> tuple[list[str], list[str]]:
        """Training and validation document texts (validation: its own sources or a held-out split)."""
        if not hasattr(self, "_documents"):
            data = self.config.data
            train = [doc.text for doc in load_documents(data.train.sources, seed=self.config.trainer.seed)]
            if data.validation is not None:
                validation = [
                    doc.text for doc in load_documents(data.validation.sources, seed=self.config.trainer.seed)
                ]
            elif data.validation_split > 0:
                train, validation = split_documents(train, data.validation_split, seed=self.config.trainer.seed)
            else:
                validation = []
            self._documents = (train, validation)
        return self._documents

    def build_processor(self) -> Any:
        """A byte, character, BPE (trained on the training documents) or pretrained tokenizer."""
        cfg = self.config.tokenizer
        kind, path = self.tokenizer_kind()
        needs_text = kind in ("char", "bpe")
        return build_tokenizer(
            kind,
            texts=self.documents()[0] if needs_text else None,
            vocab_size=cfg.vocab_size,
            path=path,
            trust_remote_code=cfg.trust_remote_code,
            cache_dir=self.cache_dir(),
        )

    def rows(self, docs: list[str], split: str) -> PretrainDataset:
        """Tokenize ``docs`` (cached) into rows of ``seq_len``; the split's numbers go to ``data_reports``."""
        corpus = tokenize_documents(docs, self.tokenizer, cache_dir=self.cache_dir())
        dataset = PretrainDataset(corpus, self.config.data.seq_len)
        report = DataReport()
        for length in np.diff(corpus.doc_starts, append=len(corpus.tokens)).tolist():
            report.add(length, length)  # every token carries loss in pretraining
        report.rows, report.row_length = len(dataset), self.config.data.seq_len
        # rows are cut from one stream of documents: every slot is a real token, only the tail is left out
        report.packing_efficiency = 1.0
        self.data_reports[split] = report
        return dataset

    def build_data(self) -> tuple[DataLoader, EvalBatches | None]:
        data = self.config.data
        train_docs, validation_docs = self.documents()
        train = self.rows(train_docs, "train")
        self.collator = stack_collate  # rows of seq_len tokens, stacked
        loader = DataLoader(
            train,
            global_batch_size=data.global_batch_size,
            collate_fn=self.collator,
            seed=self.config.trainer.seed,
            shuffle=data.shuffle,
            rank=get_rank(),
            world_size=get_world_size(),
        )
        if not validation_docs:
            return loader, None
        validation = self.rows(validation_docs, "validation")
        batch_size = self.config.callbacks.evaluator.batch_size or self.micro_batch_size()
        return loader, EvalBatches(
            validation, batch_size=batch_size, collate_fn=self.collator, rank=get_rank(), world_size=get_world_size()
        )
