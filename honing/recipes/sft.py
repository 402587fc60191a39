"""Supervised fine-tuning: conversations in, loss on the assistant's tokens, full or LoRA."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from honing.cache import content_hash
from honing.data.chat.conversation import (
    ensure_special_tokens,
    resolve_chat_template,
    tokenize_conversation,
    tokenize_plain_text,
)
from honing.data.chat.flat_examples import FlatExamples
from honing.data.chat.packing import PackedDataset
from honing.data.chat.padding import PaddedDataset
from honing.data.chat.prepared_rows import REJECTED_ROW, fit_chat_rows
from honing.data.collate import pad_collate
from honing.data.eval_batches import EvalBatches
from honing.data.finetune_rows import BadRowReport, load_examples, read_sources
from honing.data.formats import Conversation
from honing.data.generated.tasks import is_generated, materialize
from honing.data.loader import DataLoader
from honing.data.prepare_finetune import build_rows, prepare_rows, rows_key
from honing.data.prepared_rows import PreparedRows, is_prepared_folder
from honing.data.report import DataReport
from honing.data.text.corpus import default_cache_dir, split_documents
from honing.data.tokenizer import build_tokenizer, tokenizer_fingerprint
from honing.errors import ConfigError, DataError
from honing.recipes.base import Recipe
from honing.recipes.row_data import MemoryRows, split_rows
from honing.recipes.validation_sources import validation_batches

log = logging.getLogger(__name__)


class SFTRecipe(Recipe):
    """Chat data → chat template with assistant-only labels → packed (or padded) rows → next-token loss."""

    #: which columns its rows have (``honing.data.prepared_rows.COLUMNS``)
    row_method = "sft"

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
            fields = source.model_dump(exclude={"name"})  # a name labels metrics, not rows
            if is_prepared_folder(fields["path"]):  # the raw sources it was prepared from (generation eval reads them)
                inner = PreparedRows(fields["path"]).sources
                resolved += [{**row.fields, "weight": row.fields["weight"] * fields["weight"]} for row in inner]
                continue
            if generated(fields["path"]):
                fields["path"] = write_generated(fields["path"], self.cache_dir())
                fields["format"] = generated_format
            resolved.append(fields)
        return resolved

    def source_list(self, sources: list[Any]) -> list[dict[str, Any]]:
        """The fields of a split's sources as this method reads them (generated tasks written to the cache)."""
        return self._sources(sources)

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

    # --- rows: built once per example (the cache stores them), fitted to data.seq_len when used ---------------------
    def row_settings(self) -> dict[str, Any]:
        """Everything besides the sources that changes a row: a prepared folder made with other settings is refused,
        a cache entry made with them is not read."""
        data = self.config.data
        return {
            "tokenizer": tokenizer_fingerprint(self.tokenizer),
            "chat_template": content_hash([self.chat_template]),
            "train_on": data.train_on,
            "bad_rows": data.bad_rows,
        }

    def row_cut(self) -> int | None:
        """Rows are stored cut at ``data.seq_len`` (truncation keeps a row's head), so they serve any shorter one."""
        return self.config.data.seq_len

    def input_stamps(self, fields: list[dict[str, Any]]) -> list[str]:
        """What the cache key holds besides the sources' own files (text rows name no other file): nothing."""
        return []

    def read_items(self, fields: list[dict[str, Any]]) -> tuple[list[list[tuple[Any, str]]], BadRowReport]:
        """Each source's examples and origins in file order, and the bad rows skipped while reading."""
        return read_sources(fields, bad_rows=self.config.data.bad_rows)

    def build_row(self, example: Any) -> dict[str, Any]:
        """An example's token ids and labels, cut at ``row_cut()``, and its whole length (DataError: rejected)."""
        if isinstance(example, Conversation):
            item = tokenize_conversation(
                self.tokenizer,
                example.to_hf_messages(),
                chat_template=self.chat_template,
                train_on=self.config.data.train_on,
            )
        else:
            item = tokenize_plain_text(self.tokenizer, example.text)
        cut = self.row_cut()
        return {"input_ids": item.input_ids[:cut], "labels": item.labels[:cut], "length": len(item.input_ids)}

    def build_rows(self, items: list[Any]) -> list[dict[str, Any] | DataError]:
        """``build_row`` of each item, or the DataError that rejected it."""
        rows: list[dict[str, Any] | DataError] = []
        for item in items:
            try:
                rows.append(self.build_row(item))
            except DataError as error:
                rows.append(error)
        return rows

    def tokenize(self, examples: list[Any], split: str) -> list[Any]:
        """Tokenized examples that fit ``data.seq_len`` and carry loss; the rest are counted."""
        rows = build_rows(self.build_rows, examples)
        return self.tokenize_rows(MemoryRows(self.row_method, rows, [], BadRowReport()), range(len(rows)), split)

    def tokenize_rows(self, table: Any, indices: Sequence[int], split: str) -> FlatExamples:
        """The rows ``indices`` of ``table`` that fit ``data.seq_len`` and carry loss, as tokenized examples; the
        rest are counted in the split's data report (a rejected row fails the run under ``data.bad_rows: fail``)."""
        data = self.config.data
        fitted = fit_chat_rows(table, np.asarray(indices, dtype=np.int64), data.seq_len, data.overlong)
        report = DataReport(truncated=fitted.truncated, dropped=fitted.dropped)
        for index, kind in fitted.problems:
            row = table.row(index)
            if kind == REJECTED_ROW:
                reason = row["reason"]
            elif data.bad_rows == "fail":
                reason = (
                    "no tokens to train on (no assistant turn left after the chat template and truncation); set "
                    "data.bad_rows: skip to skip such rows"
                )
            else:
                reason = "no tokens to train on"
            if data.bad_rows == "fail":
                raise DataError(f"{row['origin']}: {reason}")
            report.reject(f"{row['origin']}: {reason}")
        # the first token of each example is never predicted (labels shift by one inside the loss)
        report.examples, report.loss_tokens = len(fitted.examples), fitted.loss_tokens
        report.lengths = fitted.examples.lengths.tolist()
        report.tokens = sum(report.lengths)
        self.data_reports[split] = report
        self.print(report.summary(split))
        if not len(fitted.examples):
            raise DataError(f"no {split} example is left to train on (see the data report above)")
        return fitted.examples

    def show_progress(self) -> bool:
        """A progress bar while rows are prepared: on an interactive terminal."""
        return sys.stderr.isatty()

    def prepare(
        self, out_dir: str, *, split: str = "train", workers: int | None = None, progress: bool = False
    ) -> tuple[PreparedRows, bool]:
        """``honing prepare``: the split's rows into the local folder ``out_dir`` (kept as they are when it already
        holds them); whether anything was built."""
        if "://" in out_dir:
            raise ConfigError(f"--out {out_dir!r}: prepared rows are read memory-mapped; give a local folder")
        section = self.config.data.train if split == "train" else self.config.data.validation
        if section is None:
            raise ConfigError(f"data.{split}: not set, so there is nothing to prepare")
        if any(is_prepared_folder(source.path) for source in section.sources):
            raise ConfigError(f"data.{split}.sources: these are already prepared folders")
        self.configure_storage()
        self.setup_processor()
        fields = self.source_list(section.sources)
        return prepare_rows(
            out_dir,
            method=self.row_method,
            key=rows_key(self.row_method, self.row_settings(), fields, self.input_stamps(fields)),
            settings=self.row_settings(),
            sources=fields,
            read=lambda: self.read_items(fields),
            build=self.build_rows,
            cut=self.row_cut(),
            workers=workers,
            progress=progress,
        )

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
        splits = split_rows(self)
        train_rows, self.collator = self.rows(self.tokenize_rows(*splits["train"], "train"), "train")
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
        if not splits.get("validation", (None, []))[1]:
            return loader, None
        batch_size = self.config.callbacks.evaluator.batch_size or self.micro_batch_size()

        def batches(part: tuple[Any, list[int]]) -> EvalBatches:
            rows, collate = self.rows(self.tokenize_rows(*part, "validation"), "validation")
            return EvalBatches(
                rows,
                batch_size=batch_size,
                collate_fn=collate,
                rank=self.parallel_dims.dp_rank,
                world_size=self.parallel_dims.dp_size,
            )

        return loader, validation_batches(self, splits["validation"], batches)

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
