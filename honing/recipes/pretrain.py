"""Pretraining: plain text in, next-token loss on every token."""

from __future__ import annotations

from typing import Any

from honing.data.eval_batches import EvalBatches
from honing.data.loader import DataLoader
from honing.data.pretrain_corpus import PretrainDataset, default_cache_dir, split_documents, tokenize_documents
from honing.data.sources import load_documents
from honing.data.tokenizer import build_tokenizer
from honing.distributed import get_rank, get_world_size
from honing.methods.lm import LMTrainModule
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
                validation = [doc.text for doc in load_documents(data.validation.sources, seed=self.config.trainer.seed)]
            elif data.validation_split > 0:
                train, validation = split_documents(train, data.validation_split, seed=self.config.trainer.seed)
            else:
                validation = []
            self._documents = (train, validation)
        return self._documents

    def build_tokenizer(self) -> Any:
        cfg = self.config.tokenizer
        needs_text = cfg.kind in ("char", "bpe")
        return build_tokenizer(cfg.kind, texts=self.documents()[0] if needs_text else None,
                               vocab_size=cfg.vocab_size, path=cfg.path, trust_remote_code=cfg.trust_remote_code,
                               cache_dir=self.cache_dir())

    def build_data(self) -> tuple[DataLoader, EvalBatches | None]:
        data = self.config.data
        train_docs, validation_docs = self.documents()
        train = PretrainDataset(tokenize_documents(train_docs, self.tokenizer, cache_dir=self.cache_dir()), data.seq_len)
        loader = DataLoader(train, global_batch_size=data.global_batch_size, seed=self.config.trainer.seed,
                            shuffle=data.shuffle, rank=get_rank(), world_size=get_world_size())
        if not validation_docs:
            return loader, None
        validation = PretrainDataset(tokenize_documents(validation_docs, self.tokenizer, cache_dir=self.cache_dir()),
                                     data.seq_len)
        batch_size = self.config.callbacks.evaluator.batch_size or self.micro_batch_size()
        return loader, EvalBatches(validation, batch_size=batch_size, rank=get_rank(), world_size=get_world_size())

    def build_train_module(self) -> LMTrainModule:
        sched = self.config.scheduler
        return LMTrainModule(
            self.model, self.build_optimizer(self.model), micro_batch_size=self.micro_batch_size(),
            scheduler={"name": sched.name, "warmup_steps": sched.warmup_steps, "min_lr_ratio": sched.min_lr_ratio,
                       "decay_fraction": sched.decay_fraction},
            grad_clip=self.config.optim.grad_clip, precision=self.config.trainer.precision, device=self.device)
