"""DPO: preference pairs in, the policy trained to prefer the chosen completion against a frozen reference.

Parts: a chat tokenizer, the preference row kind (``honing.data.preference.preference_rows.PreferenceRows``), the
reference (a frozen copy, the adapters-off policy, or log-probs precomputed by
``honing.methods.dpo_reference.PrecomputedReference``), the DPO train module.
"""

from __future__ import annotations

from typing import Any

import torch

from honing.config.schema import DPOSection
from honing.data.finetune_data import RunData, build_finetune_data
from honing.data.preference.preference_rows import PreferenceRows
from honing.methods.dpo import DPO_LOSS_SETTINGS, DPOTrainModule
from honing.recipes.base import Recipe, train_module_options, use_chat_tokenizer
from honing.recipes.pair_parts import check_pair_attention, held_out_answers, packed_pairs, preference_rows
from honing.recipes.reference_parts import build_reference_model, lazy_reference_cache, precomputed_reference


class DPORecipe(Recipe):
    """Pairs → chat template (prompt with the generation prompt, completions the rest) → padded pair batches →
    DPO loss against a frozen copy, the adapters-off model, or precomputed reference log-probs."""

    def __init__(self, config: Any):
        super().__init__(config)
        self.dpo = config.dpo or DPOSection()  # its defaults when absent
        self.packed_pairs = packed_pairs(config, self.dpo)

    def build_model_assets(self) -> list[Any]:
        """A byte-level or pretrained tokenizer with the run's chat template."""
        return use_chat_tokenizer(self)

    def build_reference_model(self, model: torch.nn.Module) -> torch.nn.Module | None:
        """A frozen copy of the initial model for ``dpo.reference: copy``, sharded like the policy under FSDP2 (none
        for ``adapters_off`` and ``precompute``)."""
        return build_reference_model(self, model, self.dpo.reference)

    def row_kind(self) -> PreferenceRows:
        """Preference pairs through the chat template, batched by the pair collator."""
        return preference_rows(self)

    def build_data(self) -> RunData:
        """Pair batches; with ``dpo.reference: precompute``, each dataset scored by the initial model first."""
        attention = check_pair_attention(self)
        kind = self.row_kind()
        reference = None
        if self.dpo.reference == "precompute":
            reference = precomputed_reference(
                self, kind.collator, attention=attention, packed=self.packed_pairs, ld_alpha=self.dpo.ld_alpha
            )
        return build_finetune_data(
            kind, self.config.data, self.data_placement(), finish=reference.attach if reference else None
        )

    def build_train_module(self) -> DPOTrainModule:
        """The DPO TrainModule with the run's ``dpo`` settings and reference."""
        cfg = self.dpo
        return DPOTrainModule(
            self.model,
            self.build_optimizer(self.model),
            **{name: getattr(cfg, name) for name in DPO_LOSS_SETTINGS},
            reference=cfg.reference,
            reference_model=self.reference_model,
            reference_cache=lazy_reference_cache(
                self, self.dpo.reference, packed=self.packed_pairs, ld_alpha=cfg.ld_alpha
            ),
            packed_pairs=self.packed_pairs,
            **train_module_options(self),
        )

    def held_out_answers(self) -> list[tuple[list[dict[str, Any]], str]]:
        """The validation prompts with their chosen reply's text (the answer the generation eval expects)."""
        return held_out_answers(self)
