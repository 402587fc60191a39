"""DPO: preference pairs in, the policy trained to prefer the chosen completion against a frozen reference.

Parts: a chat tokenizer, the preference row kind (``honing.data.preference.preference_rows.PreferenceRows``), the
reference (a frozen copy, the adapters-off policy, or log-probs precomputed by
``honing.methods.dpo_reference.PrecomputedReference``: ``honing.recipes.pair_recipe``), the DPO train module.
"""

from __future__ import annotations

from honing.config import RunConfig
from honing.config.schema import DPOSection
from honing.data.preference.preference_rows import PreferenceRows
from honing.methods.dpo import DPO_LOSS_SETTINGS, DPOTrainModule
from honing.recipes.pair_parts import held_out_answers, preference_rows
from honing.recipes.pair_recipe import PairRecipe
from honing.run.parts import HeldOutAnswers, ModelAssets, TrainInputs


class DPORecipe(PairRecipe):
    """Pairs → chat template (prompt with the generation prompt, completions the rest) → padded pair batches →
    DPO loss against a frozen copy, the adapters-off model, or precomputed reference log-probs."""

    def __init__(self, config: RunConfig):
        self.dpo: DPOSection = config.dpo or DPOSection()  # its defaults when absent
        super().__init__(config, self.dpo)

    def row_kind(self, assets: ModelAssets) -> PreferenceRows:
        """Preference pairs through the chat template, batched by the pair collator."""
        return preference_rows(
            assets, self.config.data, cache_dir=self.cache_dir, attention=self.models.attention_name()
        )

    def build_train_module(self, inputs: TrainInputs) -> DPOTrainModule:
        """The DPO TrainModule with the run's ``dpo`` settings and reference."""
        cfg = self.dpo
        return DPOTrainModule(
            inputs.model,
            self.build_optimizer(inputs.model),
            **{name: getattr(cfg, name) for name in DPO_LOSS_SETTINGS},
            reference=cfg.reference,
            reference_model=inputs.reference_model,
            reference_cache=self.lazy_reference_cache(inputs.model),
            packed_pairs=self.packed_pairs,
            **self.train_module_options(inputs.data.collator),
        )

    def held_out_answers(self, assets: ModelAssets) -> HeldOutAnswers:
        """The validation prompts with their chosen reply's text (the answer the generation eval expects)."""
        return held_out_answers(self.row_kind(assets), self.config)
