"""Pretraining's data: plain text in, rows of ``seq_len`` tokens out, next-token loss on every token.

Text sources are read into memory and tokenized (cached): right for small corpora such as the quickstart's.
A corpus of any size is first prepared into token shards (``honing prepare``, ``honing.data.text.prepare``) and read
memory-mapped with ``format: tokens`` sources; both give the same rows of ``seq_len`` to the same loader.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from honing import storage
from honing.data.eval_batches import EvalBatches
from honing.data.finetune_data import evaluation_batches
from honing.data.loader import Collate, DataLoader, DataPlacement, training_loader
from honing.data.report import DataReport
from honing.data.special_tokens import apply_token_settings
from honing.data.text.corpus import PretrainDataset, split_documents, tokenize_documents
from honing.data.text.documents import load_documents
from honing.data.text.prepare import DEFAULT_SHARD_BYTES, PrepareResult, prepare_tokens
from honing.data.text.prepare_inputs import sample_texts
from honing.data.text.token_shards import TOKENIZER_DIR, local_folder, read_index
from honing.data.text.token_windows import RowWindow, TokenRows, TokenSource, split_windows
from honing.data.tokenizer import build_tokenizer, load_pretrained_tokenizer, tokenizer_fingerprint, tokenizer_kind
from honing.errors import ConfigError, DataError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from honing.config.schema import RunConfig

TOKENIZER_SAMPLE_BYTES = 64 * 2**20  # text a bpe / char tokenizer is trained on when preparing a corpus
REPORT_LENGTHS = 100_000  # document lengths of prepared folders the data report describes


class PretrainText:
    """Tokenize documents, concatenate them with an end-of-document token, cut rows of ``seq_len``; or read rows
    from prepared token shards. ``config`` is the run's config (its ``data``, ``tokenizer`` and ``model`` sections
    and the seed are read)."""

    def __init__(self, config: RunConfig, *, cache_dir: str, printer: Callable[[str], None] = print):
        self.data, self.tokenizer_cfg, self.seed = config.data, config.tokenizer, config.trainer.seed
        self.name_or_path = config.model.name_or_path
        self.cache_dir, self.printer = cache_dir, printer
        self._documents: tuple[list[str], list[str]] | None = None

    def token_sources(self, split: str) -> list[Any] | None:
        """The split's sources when they are prepared folders (``format: tokens``), else None."""
        section = self.data.train if split == "train" else self.data.validation
        if section is None:
            return None
        prepared = [source.format == "tokens" for source in section.sources]
        if any(prepared) and not all(prepared):
            raise ConfigError(
                f"data.{split}.sources: format: tokens sources cannot be mixed with text sources; prepare every "
                "source with `honing prepare CONFIG --out DIR` and list the folders, or use text sources only"
            )
        return list(section.sources) if all(prepared) else None

    def documents(self) -> tuple[list[str], list[str]]:
        """Training and validation document texts (validation: its own sources or a held-out split)."""
        if self._documents is None:
            data, seed = self.data, self.seed
            separator = data.text_document_separator
            train = [
                doc.text
                for doc in load_documents(
                    data.train.sources, seed=seed, separator=separator, mixture=data.train.mixture
                )
            ]
            if data.validation is not None:
                validation = [
                    doc.text
                    for doc in load_documents(
                        data.validation.sources,
                        seed=seed,
                        separator=separator,
                        mixture=data.validation.mixture,
                        where="data.validation",
                    )
                ]
            elif data.validation_split > 0:
                train, validation = split_documents(train, data.validation_split, seed=seed)
            else:
                validation = []
            self._documents = (train, validation)
        return self._documents

    def tokenizer(self) -> PreTrainedTokenizerBase:
        """A byte, character, BPE (trained on the training documents) or pretrained tokenizer; with prepared
        sources, the tokenizer they were prepared with (checked by fingerprint)."""
        cfg = self.tokenizer_cfg
        kind, path = tokenizer_kind(cfg, self.name_or_path)
        prepared = self.token_sources("train")
        if prepared is not None:
            if kind in ("char", "bpe"):  # trained when the corpus was prepared: read it back from the folder
                folder = local_folder(prepared[0].path, self.cache_dir)
                tokenizer = load_pretrained_tokenizer(storage.join(folder, TOKENIZER_DIR))
            else:
                tokenizer = build_tokenizer(kind, path=path, trust_remote_code=cfg.trust_remote_code)
            apply_token_settings(tokenizer, cfg)  # as when the corpus was prepared (a no-op on its saved folder)
            self.check_prepared_tokenizer(tokenizer)
            return tokenizer
        tokenizer = build_tokenizer(
            kind,
            texts=self.documents()[0] if kind in ("char", "bpe") else None,
            vocab_size=cfg.vocab_size,
            path=path,
            trust_remote_code=cfg.trust_remote_code,
            cache_dir=self.cache_dir,
        )
        apply_token_settings(tokenizer, cfg)
        return tokenizer

    def check_prepared_tokenizer(self, tokenizer: PreTrainedTokenizerBase) -> None:
        """Every prepared source was tokenized by ``tokenizer``; DataError naming the source otherwise."""
        fingerprint = tokenizer_fingerprint(tokenizer)
        for split in ("train", "validation"):
            for number, source in enumerate(self.token_sources(split) or []):
                index = read_index(source.path)
                if index.tokenizer_fingerprint != fingerprint:
                    raise DataError(
                        f"data.{split}.sources[{number}] ({source.path!r}): prepared with another tokenizer "
                        f"(fingerprint {index.tokenizer_fingerprint[:12]}, this run's {fingerprint[:12]}); "
                        "prepare it again with this config's tokenizer settings"
                    )

    def rows(self, docs: list[str], tokenizer: PreTrainedTokenizerBase) -> tuple[PretrainDataset, DataReport]:
        """Tokenize ``docs`` (cached) into rows of ``seq_len``, and the split's numbers."""
        corpus = tokenize_documents(docs, tokenizer, cache_dir=self.cache_dir)
        dataset = PretrainDataset(corpus, self.data.seq_len, document_masking=self.data.document_masking)
        report = DataReport()
        for length in np.diff(corpus.doc_starts, append=len(corpus.tokens)).tolist():
            report.add(length, length)  # every token carries loss in pretraining
        report.rows, report.row_length = len(dataset), self.data.seq_len
        # rows are cut from one stream of documents: every slot is a real token, only the tail is left out
        report.packing_efficiency = 1.0
        return dataset, report

    def token_rows(self) -> tuple[TokenRows, TokenRows | None, dict[str, DataReport]]:
        """Training and validation rows read memory-mapped from prepared folders, and their reports."""
        data, seed = self.data, self.seed
        document_masking = data.document_masking

        def windows(split: str) -> tuple[list[RowWindow], list[RowWindow]]:
            if getattr(data, split).mixture is not None:
                raise ConfigError(
                    f"data.{split}.mixture: prepared token folders (format: tokens) are read whole, each by its "
                    "weight; mix the raw text sources instead, or remove the mixture"
                )
            train, held_out = [], []
            for source in self.token_sources(split) or []:
                opened = TokenSource(source.path, data.seq_len, cache_dir=self.cache_dir)
                fraction = data.validation_split if split == "train" and data.validation is None else 0.0
                window, validation = split_windows(opened, fraction, source.weight)
                train.append(window)
                held_out += [validation] if validation is not None else []
            return train, held_out

        train_windows, held_out = windows("train")
        validation_windows = windows("validation")[0] if data.validation is not None else held_out
        if data.validation is not None and self.token_sources("validation") is None:
            raise ConfigError(
                "data.validation.sources: with format: tokens training sources, validation sources must be prepared "
                "folders too (format: tokens), or use data.validation_split"
            )
        train = TokenRows(train_windows, seed=seed, document_masking=document_masking)
        validation = (
            TokenRows(validation_windows, seed=seed, document_masking=document_masking) if validation_windows else None
        )
        reports = {split: token_report(rows) for split, rows in (("train", train), ("validation", validation)) if rows}
        return train, validation, reports

    def build(
        self, tokenizer: PreTrainedTokenizerBase, collate: Collate, place: DataPlacement
    ) -> tuple[DataLoader, EvalBatches | None, dict[str, DataReport]]:
        """The training loader, the validation batches (or None) and the reports; ``place``: this process's
        slice of the data (``honing.data.loader.DataPlacement``)."""
        if self.token_sources("train") is not None:
            train, validation, reports = self.token_rows()
        else:
            train_docs, validation_docs = self.documents()
            train, train_report = self.rows(train_docs, tokenizer)
            reports = {"train": train_report}
            validation = None
            if validation_docs:
                validation, reports["validation"] = self.rows(validation_docs, tokenizer)
        loader = training_loader(train, collate, self.data, place)  # place.seed: the run's seed, as self.seed
        if validation is None:
            return loader, None, reports
        return loader, evaluation_batches(validation, collate, place), reports

    def prepare(
        self,
        out_dir: str,
        *,
        workers: int | None = None,
        shard_bytes: int = DEFAULT_SHARD_BYTES,
        progress: bool = False,
    ) -> PrepareResult:
        """``honing prepare``: tokenize ``data.train.sources`` with this config's tokenizer into ``out_dir``."""
        if self.token_sources("train") is not None:
            raise ConfigError("data.train.sources: these are already prepared folders (format: tokens)")
        cfg, separator = self.tokenizer_cfg, self.data.text_document_separator
        kind, path = tokenizer_kind(cfg, self.name_or_path)
        texts = (
            sample_texts(self.data.train.sources, TOKENIZER_SAMPLE_BYTES, separator=separator)
            if kind in ("char", "bpe")
            else None
        )
        tokenizer = build_tokenizer(
            kind,
            texts=texts,
            vocab_size=cfg.vocab_size,
            path=path,
            trust_remote_code=cfg.trust_remote_code,
            cache_dir=self.cache_dir,
        )
        apply_token_settings(tokenizer, cfg)
        return prepare_tokens(
            self.data.train.sources,
            tokenizer,
            out_dir,
            workers=workers,
            shard_bytes=shard_bytes,
            separator=separator,
            progress=progress,
        )


def token_report(rows: TokenRows) -> DataReport:
    """A split's numbers from the prepared indexes (documents are not walked one by one: there may be billions)."""
    report = DataReport()
    indexes = [window.source.index for window in rows.windows]
    report.examples = sum(index.num_documents for index in indexes)
    report.tokens = report.loss_tokens = rows.num_tokens
    report.rows, report.row_length, report.packing_efficiency = len(rows), rows.seq_len, 1.0
    for source in {id(window.source): window.source for window in rows.windows}.values():
        for tokens, starts in zip(source.tokens, source.doc_starts):
            room = REPORT_LENGTHS - len(report.lengths)  # the length statistics come from a bounded sample
            if room <= 0:
                return report
            head = starts[: room + 1]  # only what the sample needs is read from the memory map
            report.lengths += (np.diff(head) if len(head) > room else np.diff(head, append=len(tokens))).tolist()
    return report
