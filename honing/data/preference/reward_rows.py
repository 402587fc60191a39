"""A reward model's row kind: DPO's preference pairs (the same readers, template and pair rows), each with the margin
of its row's optional ``margin`` column (TRL's RewardTrainer's), carried into the batches as ``margin``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from honing.data.preference.batches import PairCollator, PairDataset, TokenizedPair
from honing.data.preference.pairs import PreferencePair
from honing.data.preference.preference_rows import PreferenceRows
from honing.data.report import DataReport


@dataclass
class MarginPair(TokenizedPair):
    """A pair's token ids and its margin (0 when its row has none)."""

    margin: float = 0.0


class MarginPairDataset(PairDataset):
    """One tokenized pair per item, with its ``margin``."""

    def __getitem__(self, index: int) -> dict[str, Any]:
        item = super().__getitem__(index)
        item["margin"] = float(getattr(self.pairs[index], "margin", 0.0))
        return item


class MarginPairCollator(PairCollator):
    """The pair collator, with each pair's margin as ``margin`` (pairs,) in float32."""

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        batch = super().__call__(items)
        batch["margin"] = torch.tensor([float(item.get("margin", 0.0)) for item in items], dtype=torch.float32)
        return batch


class RewardRows(PreferenceRows):
    """Preference pairs → prompt, chosen and rejected token ids and the row's margin → ``MarginPairDataset``."""

    method = "reward"

    def build_one(self, pair: PreferencePair) -> dict[str, Any]:
        """One pair's row with its margin (null without one)."""
        return {**super().build_one(pair), "margin": pair.margin}

    def tokenized(self, row: dict[str, Any]) -> MarginPair:
        """A stored row's pair and margin."""
        margin = row.get("margin")
        return MarginPair(row["prompt_ids"], row["chosen_ids"], row["rejected_ids"], 0.0 if margin is None else margin)

    def dataset(self, fitted: list[TokenizedPair], report: DataReport) -> tuple[PairDataset, PairCollator]:
        """The pairs with their margins as a dataset, batched by a collator that carries them."""
        dataset = MarginPairDataset(fitted)
        report.rows, report.row_length = len(dataset), max(dataset.lengths)
        return dataset, MarginPairCollator(self.collator.pad_token_id, additive_mask=self.collator.additive_mask)
