"""Chat rows (SFT): conversations (or plain texts) tokenized with the chat template and assistant-only labels
(``ChatRows``, the SFT row kind), and fitted to a row length over a table's columns at once: no Python object per
row, so 100k prepared conversations are ready in a fraction of a second.

A row is kept whole when it fits; a longer one is dropped (``overlong: drop``) or cut to its head, and dropped
when the cut leaves nothing to learn (over-long, not bad); a row that fits but carries no loss, or that was
rejected when it was built, is a problem the caller reports or fails on (``data.bad_rows``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from honing.data.chat.conversation import tokenize_conversation, tokenize_plain_text
from honing.data.chat.flat_examples import FlatExamples
from honing.data.chat.packing import PackedDataset
from honing.data.chat.padding import PaddedDataset
from honing.data.collate import pad_collate
from honing.data.formats import Conversation, Example
from honing.data.prepared_rows import REJECTED
from honing.data.report import DataReport
from honing.data.row_kind import TemplatedRows, build_each
from honing.data.row_reader import BadRowReport, read_sources
from honing.data.splits import RowTable
from honing.errors import DataError
from honing.losses import IGNORE_INDEX

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from honing.config.data_schema import DataSection

NO_TOKENS = "no_tokens"  # a problem's kind: the row fits but carries no loss
REJECTED_ROW = "rejected"  # ... or it was rejected when it was built (its reason is in the row)


@dataclass
class FittedRows:
    """The kept examples in order, their loss tokens (the first token of each is never predicted), the counts, and
    each problem row's index in ``table`` and kind, in the order the rows are used."""

    examples: FlatExamples
    loss_tokens: int
    truncated: int
    dropped: int
    problems: list[tuple[int, str]]


def fit_chat_rows(table: RowTable, indices: np.ndarray, seq_len: int, overlong: str) -> FittedRows:
    """The rows ``indices`` of ``table`` (columns ``status``, ``length``, ``input_ids``, ``labels``; repeats
    allowed) fitted to ``seq_len`` tokens under ``overlong`` (``truncate`` or ``drop``)."""
    indices = np.asarray(indices, dtype=np.int64)
    ids, offsets = table.ragged("input_ids")
    labels, _ = table.ragged("labels")
    built = table.column("status")[indices] != REJECTED
    length = table.column("length")[indices]
    start = offsets[indices]
    over = built & (length > seq_len)
    # a row that fits is stored whole; one that does not is stored cut at seq_len or more
    kept_length = np.minimum(offsets[indices + 1] - start, seq_len)
    trained = np.concatenate([[0], np.cumsum(labels != IGNORE_INDEX)])
    trainable = trained[start + kept_length] - trained[start]
    dropped = over if overlong == "drop" else over & (trainable == 0)
    no_tokens = built & ~over & (trainable == 0)
    kept = built & ~dropped & ~no_tokens
    problem = np.flatnonzero(~built | no_tokens)
    problems = [(int(indices[at]), NO_TOKENS if built[at] else REJECTED_ROW) for at in problem]
    first_trained = labels[start[kept]] != IGNORE_INDEX  # kept rows hold at least one token
    return FittedRows(
        examples=FlatExamples.gather(ids, labels, start[kept], kept_length[kept]),
        loss_tokens=int(trainable[kept].sum() - first_trained.sum()),
        truncated=int((over & ~dropped).sum()),
        dropped=int(dropped.sum()),
        problems=problems,
    )


class ChatRows(TemplatedRows):
    """SFT's row kind: a conversation's token ids and labels (loss on the assistant's tokens under
    ``data.train_on``), stored cut at ``data.seq_len``; used packed into rows of ``seq_len`` or padded."""

    method = "sft"

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        chat_template: str,
        data: DataSection,
        *,
        packed_collate: Callable[[list[dict[str, Any]]], dict[str, Any]] | None = None,
        **where: Any,
    ):
        super().__init__(tokenizer, chat_template, data, **where)
        self.packed_collate = packed_collate
        self.cut = data.seq_len  # truncation keeps a row's head, so rows serve any shorter seq_len
        self.group_by_length = data.group_by_length and not data.packing

    def settings(self) -> dict[str, Any]:
        """The tokenizer, the chat template, the label policy and the bad-row policy."""
        return {**super().settings(), "train_on": self.data.train_on, "bad_rows": self.data.bad_rows}

    def read(self, fields: list[dict[str, Any]]) -> tuple[list[list[tuple[Any, str]]], BadRowReport]:
        """Each source's examples and origins in file order, and the bad rows skipped while reading."""
        return read_sources(fields, bad_rows=self.data.bad_rows)

    def build(self, items: list[Any]) -> list[dict[str, Any] | Exception]:
        """Each example's token ids and labels cut at ``cut`` and its whole length, or the DataError rejecting it."""
        return build_each(items, self.build_one)

    def build_one(self, example: Example) -> dict[str, Any]:
        """One example's row (DataError: rejected)."""
        if isinstance(example, Conversation):
            item = tokenize_conversation(
                self.tokenizer,
                example.to_hf_messages(),
                chat_template=self.chat_template,
                train_on=self.data.train_on,
                tools=example.tools,
            )
        else:
            item = tokenize_plain_text(self.tokenizer, example.text)
        cut = self.cut
        return {"input_ids": item.input_ids[:cut], "labels": item.labels[:cut], "length": len(item.input_ids)}

    def fit(self, table: RowTable, indices: Sequence[int], split: str) -> tuple[FlatExamples, DataReport]:
        """The rows ``indices`` that fit ``data.seq_len`` and carry loss; the rest counted in the report (a rejected
        row fails the run under ``data.bad_rows: fail``)."""
        data = self.data
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
        self.printer(report.summary(split))
        if not len(fitted.examples):
            raise DataError(f"no {split} example is left to train on (see the data report above)")
        return fitted.examples, report

    def dataset(
        self, fitted: FlatExamples, report: DataReport
    ) -> tuple[PackedDataset | PaddedDataset, Callable[[list[dict[str, Any]]], dict[str, Any]] | None]:
        """Rows packed to ``data.seq_len`` (``data.packing``) or padded, and their collator."""
        pad_id, seq_len = self.tokenizer.pad_token_id, self.data.seq_len
        if self.data.packing:
            packed = PackedDataset(fitted, seq_len, pad_token_id=pad_id)
            report.rows, report.row_length = len(packed), seq_len
            report.packing_efficiency = packed.packing_efficiency
            self.printer(
                f"packed into {len(packed):,} rows of {seq_len} tokens ({packed.packing_efficiency:.1%} real tokens)"
            )
            return packed, self.packed_collate
        report.rows, report.row_length = len(fitted), max(report.lengths)
        return PaddedDataset(fitted), pad_collate(pad_id)
