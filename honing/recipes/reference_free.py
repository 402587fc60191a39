"""ORPO and CPO / SimPO: preference pairs in, the policy trained on its own log-probs alone, no reference model.

Parts: a chat tokenizer, the preference row kind (``honing.data.preference.preference_rows.PreferenceRows``, the
rows DPO prepares), and the pair step (``honing.methods.pairs.PairTrainModule``) with the method's loss part
(``honing.methods.pair_losses``): ``method: orpo`` → ``ORPOLoss``, ``method: cpo`` → ``CPOLoss``. Nothing else is
held in memory beside the policy: no frozen copy, no reference forward, no precomputed log-probs.
"""

from __future__ import annotations

from honing.config import RunConfig
from honing.config.schema import CPOSection, ORPOSection
from honing.data.preference.preference_rows import PreferenceRows
from honing.methods.pair_losses import CPOLoss, ORPOLoss, PairLoss
from honing.recipes.pair_parts import held_out_answers, preference_rows
from honing.recipes.pair_recipe import PairRecipe
from honing.run.parts import HeldOutAnswers, ModelAssets

#: method → its section's type (the defaults when the section is absent)
SECTIONS: dict[str, type] = {"orpo": ORPOSection, "cpo": CPOSection}
#: method → its loss part, built from the section's keys of the same names
LOSSES: dict[str, type[PairLoss]] = {"orpo": ORPOLoss, "cpo": CPOLoss}


class ReferenceFreeRecipe(PairRecipe):
    """Pairs → chat template (prompt with the generation prompt, completions the rest) → packed pair batches → the
    method's reference-free pair loss."""

    def __init__(self, config: RunConfig):
        super().__init__(config, getattr(config, config.method) or SECTIONS[config.method]())
        self.loss_class = LOSSES[config.method]

    def row_kind(self, assets: ModelAssets) -> PreferenceRows:
        """Preference pairs through the chat template, batched by the pair collator."""
        return preference_rows(assets, self.config, cache_dir=self.cache_dir, attention=self.models.attention_name())

    def held_out_answers(self, assets: ModelAssets) -> HeldOutAnswers:
        """The validation prompts with their chosen reply's text (the answer the generation eval expects)."""
        return held_out_answers(self.row_kind(assets), self.config)
