"""DPO: preference pairs in, the policy trained to prefer the chosen completion against a frozen reference.

Parts: a chat tokenizer, the preference row kind (``honing.data.preference.preference_rows.PreferenceRows``), the
reference (a frozen copy, the adapters-off policy, or log-probs precomputed by
``honing.methods.dpo_reference.PrecomputedReference``: ``honing.recipes.pair_recipe``), the DPO train module.
"""

from __future__ import annotations

from typing import Any

from honing.config import RunConfig
from honing.config.schema import DPOSection
from honing.data.preference.preference_rows import PreferenceRows
from honing.methods.dpo import DPO_LOSS_SETTINGS, DPOTrainModule
from honing.recipes.pair_parts import held_out_answers, preference_rows
from honing.recipes.pair_recipe import PairRecipe
from honing.run.parts import HeldOutAnswers, ModelAssets


class DPORecipe(PairRecipe):
    """Pairs → chat template (prompt with the generation prompt, completions the rest) → padded pair batches →
    DPO loss against a frozen copy, the adapters-off model, or precomputed reference log-probs."""

    train_module_class = DPOTrainModule

    def __init__(self, config: RunConfig):
        self.dpo: DPOSection = config.dpo or DPOSection()  # its defaults when absent
        super().__init__(config, self.dpo)

    def row_kind(self, assets: ModelAssets) -> PreferenceRows:
        """Preference pairs through the chat template, batched by the pair collator."""
        return preference_rows(assets, self.config, cache_dir=self.cache_dir, attention=self.models.attention_name())

    def loss_options(self) -> dict[str, Any]:
        """The run's ``dpo`` loss settings (the DPO train module builds its loss part from them)."""
        return {name: getattr(self.dpo, name) for name in DPO_LOSS_SETTINGS}

    def held_out_answers(self, assets: ModelAssets) -> HeldOutAnswers:
        """The validation prompts with their chosen reply's text (the answer the generation eval expects)."""
        return held_out_answers(self.row_kind(assets), self.config)
