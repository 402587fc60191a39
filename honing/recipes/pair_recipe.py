"""The steps the pair methods' recipes share (DPO, KTO, ORPO, CPO / SimPO, reward): the chat tokenizer, the method's
section and whether its pairs are packed, pair batches behind the attention check, and, for a section with a
``reference`` key (DPO's, KTO's), the reference: a frozen copy, log-probs precomputed before training or cached as
batches need them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch

from honing.config import RunConfig
from honing.data.finetune_data import RunData, build_finetune_data
from honing.data.row_kind import RowKind
from honing.methods.reference_cache import ReferenceCache
from honing.recipes.base import Recipe, chat_assets
from honing.recipes.pair_parts import check_pair_attention, packed_pairs
from honing.recipes.reference_parts import build_reference_model, lazy_reference_cache, precomputed_reference
from honing.run.parts import ModelAssets


class PairSection(Protocol):
    """A pair method's section, as far as these steps read it."""

    packed_pairs: bool


class PairRecipe(Recipe):
    """A pair method's recipe over its ``section``; the method's own adds its row kind and train module."""

    def __init__(self, config: RunConfig, section: PairSection):
        super().__init__(config)
        self.section = section
        self.packed_pairs = packed_pairs(config, section)

    def model_assets(self) -> ModelAssets:
        """A byte-level or pretrained tokenizer with the run's chat template."""
        return chat_assets(self.config)

    @property
    def reference(self) -> str | None:
        """The section's ``reference`` (copy, adapters_off, precompute, lazy); None for a method without one."""
        return getattr(self.section, "reference", None)

    def build_reference_model(self, model: torch.nn.Module, assets: ModelAssets) -> torch.nn.Module | None:
        """A frozen copy of the initial model for ``reference: copy`` (and ``lazy`` without LoRA), sharded like the
        policy under FSDP2; none for ``adapters_off``, ``precompute`` and the methods without a reference."""
        if self.reference is None:
            return None
        return build_reference_model(model, self.reference, self.config, self.placement)

    def build_data(self, assets: ModelAssets, model: torch.nn.Module | None = None) -> RunData:
        """Pair batches (a flash kernel, which cannot take the pairs' mask, is refused first); with ``reference:
        precompute``, each dataset scored by the initial ``model`` first (none in ``honing data``)."""
        attention = check_pair_attention(self.models.attention_name())
        kind = self.row_kind(assets)
        finish = self.precomputed_reference(kind, model, attention)
        return build_finetune_data(kind, self.config.data, self.data_placement(), finish=finish)

    def precomputed_reference(
        self, kind: RowKind, model: torch.nn.Module | None, attention: str
    ) -> Callable[[Any], Any] | None:
        """What attaches the initial model's log-probs to a dataset (``reference: precompute``), else None."""
        if self.reference != "precompute":
            return None
        reference = precomputed_reference(
            model,
            kind.collator,  # type: ignore[attr-defined]  # the pair row kinds' collator
            self.config,
            self.placement,
            cache_dir=self.cache_dir,
            attention=attention,
            packed=self.packed_pairs,
            ld_alpha=getattr(self.section, "ld_alpha", None),  # DPO's LD-DPO log-probs
        )
        return reference.attach if reference else None

    def lazy_reference_cache(self, model: torch.nn.Module) -> ReferenceCache | None:
        """The per-row store of ``reference: lazy`` (None for the other references)."""
        if self.reference is None:
            return None
        return lazy_reference_cache(
            model,
            self.reference,
            self.config,
            precision=self.precision,
            attention=self.models.attention_name(),
            cache_dir=self.cache_dir,
            packed=self.packed_pairs,
            ld_alpha=getattr(self.section, "ld_alpha", None),
        )
