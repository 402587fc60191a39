"""KTO's row kind: unpaired examples (a prompt, one completion, desirable or not) rendered with the chat template as
DPO's pairs are, stored whole (the ``kto`` columns of prepared rows), fitted to ``data.seq_len`` when used, then each
given a mismatched completion, another row's, whose log-ratio estimates the KL term. A row is batched as a pair is,
``prompt | completion | mismatched completion``: one forward scores both, the prompt computed once.

``kto.kl_pairing: batch`` (TRL's) rotates the completions by one within each micro-batch as it is collated, as TRL
does within each ``per_device_train_batch_size`` batch; ``split`` rotates the rows by one along a seeded random cycle
over the split, once, so that the mismatched completion of a row is fixed before training (the precomputed reference
scores it) whatever the loader's order, and never the row's own.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import torch

from honing.data.preference.batches import PairCollator, PairDataset, TokenizedPair, fit_pair, tokenize_pair
from honing.data.preference.kto_examples import KTOExample, read_example_sources
from honing.data.preference.pairs import PreferencePair
from honing.data.preference.preference_rows import PreferenceRows
from honing.data.report import DataReport
from honing.data.row_reader import BadRowReport
from honing.data.splits import RowTable
from honing.errors import DataError

#: the fitted rows (each with its mismatched completion), each row's label and each row's preference pair
KTOFitted = tuple[list[TokenizedPair], list[bool], list[int]]


class KTOCollator(PairCollator):
    """The pair collator over rows ``prompt | completion | mismatched completion``, with each row's label as
    ``desirable`` (bool) and, as ``pair``, the preference pair it came from (-1: none). With ``kl_rows`` (the
    micro-batch size; ``kto.kl_pairing: batch``), each run of ``kl_rows`` rows takes its mismatched completions by
    rotating its own completions (``batch_kl_completions``), cut to what the prompt leaves of ``seq_len``."""

    def __init__(self, *args: Any, kl_rows: int | None = None, seq_len: int | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.kl_rows, self.seq_len = kl_rows, seq_len

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if self.kl_rows is not None:
            items = with_batch_kl_completions(items, self.kl_rows, self.seq_len)
        batch = super().__call__(items)
        batch["desirable"] = torch.tensor([bool(item["desirable"]) for item in items], dtype=torch.bool)
        batch["pair"] = torch.tensor([item.get("pair", -1) for item in items], dtype=torch.long)
        return batch


class KTODataset(PairDataset):
    """One KTO row per item: its prompt, completion (``chosen_ids``), mismatched completion (``rejected_ids``),
    label and pair (the preference pair both rows of which it is one of, -1: none), with the reference's log-probs of
    both completions once they are precomputed."""

    def __init__(self, rows: Sequence[TokenizedPair], desirable: Sequence[bool], pairs: Sequence[int] | None = None):
        super().__init__(rows)
        self.desirable = [bool(label) for label in desirable]
        self.pair_of = list(pairs) if pairs is not None else [-1] * len(self.desirable)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {**super().__getitem__(index), "desirable": self.desirable[index], "pair": self.pair_of[index]}


class KTORows(PreferenceRows):
    """Examples → prompt and completion token ids → fitted rows with a mismatched completion → ``KTODataset``."""

    method = "kto"

    def __init__(self, *args: Any, seed: int, mismatched: Literal["split", "batch", "none"] = "split", **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.seed = seed
        # batch: the collator pairs each micro-batch; none (apo_zero_unpaired, no KL term): the mismatched slot holds
        # one token, scored and unused
        self.mismatched = mismatched

    def read(self, fields: list[dict[str, Any]]) -> tuple[list[list[tuple[Any, str]]], BadRowReport]:
        """Each source's KTO examples and origins in file order (a pair gives two), and the bad rows skipped."""
        return read_example_sources(fields, bad_rows=self.data.bad_rows)

    def build_one(self, example: KTOExample) -> dict[str, Any]:
        """One example's row: prompt and completion token ids (cut where the rendered sequences part, as a pair's
        replies are) and its label (DataError: rejected)."""
        pair = PreferencePair(example.prompt, example.completion, example.completion)
        item = tokenize_pair(self.tokenizer, pair, chat_template=self.chat_template)
        return {"prompt_ids": item.prompt_ids, "completion_ids": item.chosen_ids, "label": int(example.desirable)}

    def fit(self, table: RowTable, indices: Sequence[int], split: str) -> tuple[KTOFitted, DataReport]:
        """The rows ``indices`` of ``table`` fitted to ``data.seq_len`` (``data.overlong``), each with its
        mismatched completion cut to what the prompt leaves; bad rows counted in the data report."""
        data = self.data
        report, fitted, labels, origins = DataReport(), [], [], []
        for row in self.built_rows(table, indices, split, report):
            completion = row["completion_ids"]
            item = fit_pair(
                TokenizedPair(row["prompt_ids"], completion, completion),
                data.seq_len,
                data.overlong,
                max_prompt=data.max_prompt_length,
                max_completion=data.max_completion_length,
            )
            if item is None:
                report.dropped += 1
                continue
            report.truncated += len(item.prompt_ids) + len(item.chosen_ids) < len(row["prompt_ids"]) + len(completion)
            report.add(len(item.prompt_ids) + len(item.chosen_ids), len(item.chosen_ids))
            fitted.append(item)
            labels.append(bool(row["label"]))
            origins.append(row["origin"])
        desirable = sum(labels)
        self.printer(
            report.summary(split) + f" ({desirable:,} desirable, {len(labels) - desirable:,} undesirable completions)"
        )
        if not fitted:
            raise DataError(f"no {split} row is left to train on (see the data report above)")
        return (self.with_mismatched(fitted), labels, pair_ids(labels, origins)), report

    def with_mismatched(self, fitted: list[TokenizedPair]) -> list[TokenizedPair]:
        """Each row with another row's completion after its prompt (the next one back along a seeded cycle), cut to
        ``data.seq_len``; without a KL term, one token of its own; paired in each batch, its own completion (what the
        collator replaces, a stand-in of the same length for ``group_by_length``)."""
        if self.mismatched != "split":
            kept = None if self.mismatched == "batch" else 1
            return [TokenizedPair(row.prompt_ids, row.chosen_ids, row.chosen_ids[:kept]) for row in fitted]
        order = list(range(len(fitted)))
        random.Random(f"kto-mismatched:{self.seed}").shuffle(order)  # a string seed: stable across Python runs
        rows: list[TokenizedPair | None] = [None] * len(fitted)
        for position, index in enumerate(order):
            other = fitted[order[position - 1]]  # position 0 takes the last: one cycle through every row
            room = self.data.seq_len - len(fitted[index].prompt_ids)
            rows[index] = TokenizedPair(fitted[index].prompt_ids, fitted[index].chosen_ids, other.chosen_ids[:room])
        return rows  # type: ignore[return-value]

    def dataset(self, fitted: KTOFitted, report: DataReport) -> tuple[KTODataset, KTOCollator]:
        """The rows as a dataset (one row an item), batched by the KTO collator."""
        rows, labels, pairs = fitted
        dataset = KTODataset(rows, labels, pairs)
        report.rows, report.row_length = len(dataset), max(dataset.lengths)
        return dataset, self.collator


def pair_ids(labels: Sequence[bool], origins: Sequence[str]) -> list[int]:
    """Each row's preference pair (-1: none): a desirable row and the undesirable one right after it from the same
    source row (a pair read as two rows, both kept) share the first one's position."""
    pairs = [-1] * len(labels)
    for index in range(1, len(labels)):
        if origins[index] == origins[index - 1] and labels[index - 1] and not labels[index] and pairs[index - 1] < 0:
            pairs[index - 1] = pairs[index] = index - 1
    return pairs


def batch_kl_completions(completions: Sequence[Any]) -> list[Any]:
    """TRL's KL completions of one batch: rotated by one, row i takes row i-1's and the first the last's
    (``KTOTrainer._prepare_dataset``'s ``add_kl_completion_ids``)."""
    return [completions[-1], *completions[:-1]]


def with_batch_kl_completions(
    items: Sequence[Mapping[str, Any]], rows: int, seq_len: int | None
) -> list[dict[str, Any]]:
    """The items with each run of ``rows`` (a micro-batch: the collator's ``split`` cuts the same runs) scoring the
    run's rotated completions as their mismatched ones, each cut to what its prompt leaves of ``seq_len``."""
    paired: list[dict[str, Any]] = []
    for start in range(0, len(items), rows):
        run = items[start : start + rows]
        for item, other in zip(run, batch_kl_completions([item["chosen_ids"] for item in run])):
            room = len(other) if seq_len is None else seq_len - len(item["prompt_ids"])
            paired.append({**item, "rejected_ids": list(other)[:room]})
    return paired
