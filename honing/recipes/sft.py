"""Supervised fine-tuning: conversations in, loss on the assistant's tokens, full or LoRA."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from honing.data.chat import (
    ensure_special_tokens,
    fit_to_length,
    has_trainable_tokens,
    resolve_chat_template,
    tokenize_conversation,
    tokenize_plain_text,
)
from honing.data.collate import pad_collate
from honing.data.eval_batches import EvalBatches
from honing.data.finetune_rows import load_examples
from honing.data.formats import Conversation
from honing.data.generated import is_generated, materialize
from honing.data.loader import DataLoader
from honing.data.packing import PackedDataset
from honing.data.padding import PaddedDataset
from honing.data.pretrain_corpus import default_cache_dir, split_documents
from honing.data.report import DataReport
from honing.data.tokenizer import build_tokenizer
from honing.errors import DataError
from honing.recipes.base import Recipe

log = logging.getLogger(__name__)


class SFTRecipe(Recipe):
    """Chat data → chat template with assistant-only labels → packed (or padded) rows → next-token loss."""

    # --- model assets -----------------------------------------------------------------
    def build_processor(self) -> Any:
        """A byte-level or pretrained tokenizer with the run's chat template (and its special tokens)."""
        cfg = self.config.tokenizer
        kind, path = self.tokenizer_kind()
        if kind in ("char", "bpe"):
            raise DataError(
                f"tokenizer.kind {kind!r} trains on plain text; fine-tuning needs a byte-level or pretrained tokenizer"
            )
        tokenizer = build_tokenizer(kind, path=path, trust_remote_code=cfg.trust_remote_code)
        self.chat_template = resolve_chat_template(tokenizer, self.config.data.chat_template)
        ensure_special_tokens(tokenizer, self.config.data.chat_template or self.chat_template)
        tokenizer.chat_template = self.chat_template  # saved with the tokenizer in checkpoints and exports
        return tokenizer

    # --- data -------------------------------------------------------------------------
    def cache_dir(self) -> str:
        """Where generated data sets are written."""
        return self.config.data.cache_dir or default_cache_dir()

    def _sources(
        self,
        sources: list[Any],
        *,
        generated: Callable[[str], bool] = is_generated,
        write_generated: Callable[[str, str], str] = materialize,
        generated_format: str = "conversation",
    ) -> list[dict[str, Any]]:
        """The sources' fields; a path ``generated`` recognises is written to the cache by ``write_generated``
        and read back in ``generated_format``."""
        resolved = []
        for source in sources:
            fields = source.model_dump()
            if generated(fields["path"]):
                fields["path"] = write_generated(fields["path"], self.cache_dir())
                fields["format"] = generated_format
            resolved.append(fields)
        return resolved

    def examples(self) -> tuple[list[Any], list[Any]]:
        """Training and validation examples (validation: its own sources or a held-out split)."""
        if not hasattr(self, "_examples"):
            data, seed = self.config.data, self.config.trainer.seed
            train_set = load_examples(self._sources(data.train.sources), seed=seed, bad_rows=data.bad_rows)
            train = list(zip(train_set.examples, train_set.origins))
            if data.validation is not None:
                validation_set = load_examples(
                    self._sources(data.validation.sources), seed=seed, bad_rows=data.bad_rows
                )
                validation = list(zip(validation_set.examples, validation_set.origins))
            elif data.validation_split > 0:
                train, validation = split_documents(train, data.validation_split, seed=seed)
            else:
                validation = []
            self._examples = (train, validation)
        return self._examples

    def tokenize(self, examples: list[Any], split: str) -> list[Any]:
        """Tokenized examples that fit ``data.seq_len`` and carry loss; the rest are counted."""
        data = self.config.data
        report, tokenized = DataReport(), []
        for example, origin in examples:
            try:
                if isinstance(example, Conversation):
                    item = tokenize_conversation(
                        self.tokenizer,
                        example.to_hf_messages(),
                        chat_template=self.chat_template,
                        train_on=data.train_on,
                    )
                else:
                    item = tokenize_plain_text(self.tokenizer, example.text)
            except DataError as error:
                if data.bad_rows == "fail":
                    raise DataError(f"{origin}: {error}") from None
                report.reject(f"{origin}: {error}")
                continue
            if len(item.input_ids) > data.seq_len:
                item = fit_to_length(item, data.seq_len, data.overlong)
                if item is None or not has_trainable_tokens(item):
                    # a valid row that truncation leaves with nothing to train on is over-long, not bad
                    report.dropped += 1
                    continue
                report.truncated += 1
            if not has_trainable_tokens(item):
                if data.bad_rows == "fail":
                    raise DataError(
                        f"{origin}: no tokens to train on (no assistant turn left after the chat "
                        "template and truncation); set data.bad_rows: skip to skip such rows"
                    )
                report.reject(f"{origin}: no tokens to train on")
                continue
            # the first token is never predicted (labels shift by one inside the loss)
            report.add(len(item.input_ids), sum(label != -100 for label in item.labels[1:]))
            tokenized.append(item)
        self.data_reports[split] = report
        self.print(report.summary(split))
        if not tokenized:
            raise DataError(f"no {split} example is left to train on (see the data report above)")
        return tokenized

    def rows(self, tokenized: list[Any], split: str) -> tuple[Any, Any]:
        """The dataset of ``split``'s rows and its collate function (packed or padded)."""
        pad_id = self.tokenizer.pad_token_id
        report = self.data_reports[split]
        if self.config.data.packing:
            packed = PackedDataset(tokenized, self.config.data.seq_len, pad_token_id=pad_id)
            report.rows, report.row_length = len(packed), self.config.data.seq_len
            report.packing_efficiency = packed.packing_efficiency
            self.print(
                f"packed into {len(packed):,} rows of {self.config.data.seq_len} tokens "
                f"({packed.packing_efficiency:.1%} real tokens)"
            )
            return packed, self.packed_collator()
        report.rows, report.row_length = len(tokenized), max(report.lengths)
        return PaddedDataset(tokenized), pad_collate(pad_id)

    def build_data(self) -> tuple[DataLoader, EvalBatches | None]:
        data = self.config.data
        train_examples, validation_examples = self.examples()
        train_rows, self.collator = self.rows(self.tokenize(train_examples, "train"), "train")
        loader = DataLoader(
            train_rows,
            global_batch_size=data.global_batch_size,
            collate_fn=self.collator,
            seed=self.config.trainer.seed,
            shuffle=data.shuffle,
            rank=self.parallel_dims.dp_rank,
            world_size=self.parallel_dims.dp_size,
            group_by_length=self.groups_by_length(),
            num_workers=self.config.data.num_workers,
        )
        if not validation_examples:
            return loader, None
        validation_rows, collate = self.rows(self.tokenize(validation_examples, "validation"), "validation")
        batch_size = self.config.callbacks.evaluator.batch_size or self.micro_batch_size()
        return loader, EvalBatches(
            validation_rows,
            batch_size=batch_size,
            collate_fn=collate,
            rank=self.parallel_dims.dp_rank,
            world_size=self.parallel_dims.dp_size,
        )

    def packed_rows(self) -> bool:
        """Rows hold several examples apart with ``data.packing``."""
        return self.config.data.packing

    def groups_by_length(self) -> bool:
        """Whether training batches are length-grouped: padded rows with ``data.group_by_length``."""
        return self.config.data.group_by_length and not self.config.data.packing

    # --- generation ---------------------------------------------------------------------
    def held_out_answers(self) -> list[tuple[list[dict[str, Any]], str]]:
        """The validation conversations as (messages before the last assistant turn, that turn's text)."""
        # image rows were refused or skipped as bad rows while tokenizing: text SFT cannot answer them
        held_out = [
            example for example, _ in self.examples()[1] if isinstance(example, Conversation) and not example.images()
        ]
        return [item for item in map(_prompt_and_answer, held_out) if item is not None]


def _prompt_and_answer(conversation: Conversation) -> tuple[list[dict[str, Any]], str] | None:
    """The messages before the last assistant turn, and that turn's text."""
    messages = conversation.to_hf_messages()
    if not messages or messages[-1]["role"] != "assistant":
        return None
    return messages[:-1], messages[-1]["content"]
