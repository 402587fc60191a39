"""DPO's row kind: preference pairs rendered with the chat template (the prompt with its generation prompt, each
reply the rest), stored whole, fitted to ``data.seq_len`` under ``data.overlong`` when used, padded into pair
batches whose two replies share the prompt."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from honing.data.generated.preferences import is_generated_preference, materialize
from honing.data.preference.batches import PairCollator, PairDataset, TokenizedPair, fit_pair, tokenize_pair
from honing.data.preference.pairs import PreferencePair, read_pair_sources
from honing.data.prepared_rows import REJECTED
from honing.data.report import DataReport
from honing.data.row_kind import TemplatedRows, build_each
from honing.data.row_reader import BadRowReport
from honing.data.splits import RowTable
from honing.errors import DataError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from honing.config.data_schema import DataSection


class PreferenceRows(TemplatedRows):
    """Pairs → prompt, chosen and rejected token ids → fitted pairs → ``PairDataset`` batched by ``collator``."""

    method = "dpo"
    cut = None  # data.overlong cuts a prompt from its left and the replies from their right, from the whole pair
    generated_format = "preference"

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        chat_template: str,
        data: DataSection,
        *,
        collator: PairCollator,
        **where: Any,
    ):
        super().__init__(tokenizer, chat_template, data, **where)
        self.collator = collator
        self.group_by_length = data.group_by_length

    def settings(self) -> dict[str, Any]:
        """The tokenizer, the chat template and the bad-row policy (DPO has no label policy)."""
        return {**super().settings(), "bad_rows": self.data.bad_rows}

    def generated_tasks(self) -> tuple[Any, Any]:
        """The generated preference tasks."""
        return is_generated_preference, materialize

    def read(self, fields: list[dict[str, Any]]) -> tuple[list[list[tuple[Any, str]]], BadRowReport]:
        """Each source's preference pairs and origins in file order, and the bad rows skipped while reading."""
        return read_pair_sources(fields, bad_rows=self.data.bad_rows)

    def build(self, items: list[Any]) -> list[dict[str, Any] | Exception]:
        """Each pair's prompt, chosen and rejected token ids, or the DataError rejecting it."""
        return build_each(items, self.build_one)

    def build_one(self, pair: PreferencePair) -> dict[str, Any]:
        """One pair's row (DataError: rejected)."""
        item = tokenize_pair(self.tokenizer, pair, chat_template=self.chat_template)
        return {"prompt_ids": item.prompt_ids, "chosen_ids": item.chosen_ids, "rejected_ids": item.rejected_ids}

    def fit(self, table: RowTable, indices: Sequence[int], split: str) -> tuple[list[TokenizedPair], DataReport]:
        """The pairs ``indices`` of ``table`` fitted to ``data.seq_len`` (``data.overlong``); bad rows, those skipped
        while reading included, counted in the data report."""
        report, tokenized = DataReport(), []
        for row in self.built_rows(table, indices, split, report):
            item = self.tokenized(row)
            fitted = self.fit_pair(item)
            if fitted is None:
                report.dropped += 1
                continue
            report.truncated += fitted is not item
            completions = len(fitted.chosen_ids) + len(fitted.rejected_ids)
            report.add(2 * len(fitted.prompt_ids) + completions, completions)
            tokenized.append(fitted)
        self.printer(report.summary(split).replace("examples", "pairs", 1))
        if not tokenized:
            raise DataError(f"no {split} pair is left to train on (see the data report above)")
        return tokenized, report

    def built_rows(
        self, table: RowTable, indices: Sequence[int], split: str, report: DataReport
    ) -> Iterator[dict[str, Any]]:
        """The rows ``indices`` of ``table`` that were built; a rejected one fails (``data.bad_rows: fail``) or is
        counted in ``report``, as are the rows skipped while reading."""
        # rows skipped while reading count for the split read from those sources (not for a held-out part)
        if (split == "train" or self.data.validation is not None) and table.skipped.count:
            report.rejected, report.reasons = table.skipped.count, list(table.skipped.first_reasons)
        for index in indices:
            row = table.row(index)
            if row["status"] == REJECTED:
                if self.data.bad_rows == "fail":
                    raise DataError(f"{row['origin']}: {row['reason']}") from None
                report.reject(f"{row['origin']}: {row['reason']}")
                continue
            yield row

    def tokenized(self, row: dict[str, Any]) -> TokenizedPair:
        """A stored row's pair of token ids (a kind with more columns returns them too)."""
        return TokenizedPair(row["prompt_ids"], row["chosen_ids"], row["rejected_ids"])

    def fit_pair(self, pair: TokenizedPair) -> TokenizedPair | None:
        """``pair`` fitted to ``data.seq_len`` under ``data.overlong`` (None: dropped)."""
        data = self.data
        return fit_pair(
            pair,
            data.seq_len,
            data.overlong,
            max_prompt=data.max_prompt_length,
            max_completion=data.max_completion_length,
        )

    def dataset(self, fitted: list[TokenizedPair], report: DataReport) -> tuple[PairDataset, PairCollator]:
        """The pairs as a dataset (one pair an item), batched by the pair collator."""
        dataset = PairDataset(fitted)
        report.rows, report.row_length = len(dataset), max(dataset.lengths)
        return dataset, self.collator
