"""Pretraining: plain text in, next-token loss on every token.

Parts: the text data (``honing.data.pretrain_data.PretrainText``: documents or prepared token shards, and the
tokenizer they take), packed rows of ``seq_len``, the next-token train module.
"""

from __future__ import annotations

from typing import Any

import torch

from honing.config import RunConfig
from honing.data.finetune_data import RunData
from honing.data.pretrain_data import PretrainText
from honing.data.text.prepare import PrepareResult
from honing.distributed import print0
from honing.errors import ConfigError
from honing.recipes.base import Recipe, chat_packed_collate, data_placement
from honing.recipes.build_run import configure_storage
from honing.run.parts import ModelAssets


class PretrainRecipe(Recipe):
    """Tokenize documents, concatenate them with an end-of-document token, cut rows of ``seq_len``."""

    def __init__(self, config: RunConfig):
        super().__init__(config)
        self.text = PretrainText(config, cache_dir=self.cache_dir, printer=print0)

    def packed_rows(self) -> bool:
        """Rows hold several documents apart when ``data.document_masking`` restarts their positions."""
        return self.config.data.document_masking

    def model_assets(self) -> ModelAssets:
        """The run's tokenizer (trained on the documents for ``char`` / ``bpe``)."""
        tokenizer = self.text.tokenizer()
        return ModelAssets(processor=tokenizer, tokenizer=tokenizer)

    def build_data(self, assets: ModelAssets, model: torch.nn.Module | None = None) -> RunData:
        """Rows of ``seq_len`` tokens from the documents or prepared shards, stacked (no padding)."""
        collate = chat_packed_collate(self.models)
        loader, batches, reports = self.text.build(
            assets.tokenizer, collate, data_placement(self.config, self.parallel_dims, self.cache_dir)
        )
        return RunData(loader, batches, collate, reports)

    def prepare(self, out_dir: str, **options: Any) -> PrepareResult:
        """``honing prepare``: tokenize ``data.train.sources`` with this config's tokenizer into ``out_dir``
        (``options``: the workers, shard_bytes and progress of ``PretrainText.prepare``)."""
        if self.config.method != "pretrain":
            raise ConfigError(
                f"method: honing prepare writes pretraining tokens; expected 'pretrain', got {self.config.method!r}"
            )
        configure_storage(self.config.storage)
        return self.text.prepare(out_dir, **options)
