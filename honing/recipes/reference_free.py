"""ORPO and CPO / SimPO: preference pairs in, the policy trained on its own log-probs alone, no reference model.

Parts: a chat tokenizer, the preference row kind (``honing.data.preference.preference_rows.PreferenceRows``, the
rows DPO prepares), and the pair step (``honing.methods.pairs.PairTrainModule``) with the method's loss part
(``honing.methods.pair_losses``): ``method: orpo`` → ``ORPOLoss``, ``method: cpo`` → ``CPOLoss``. Nothing else is
held in memory beside the policy: no frozen copy, no reference forward, no precomputed log-probs.
"""

from __future__ import annotations

from typing import Any

from honing.config.schema import CPOSection, ORPOSection
from honing.data.finetune_data import RunData, build_finetune_data
from honing.data.preference.preference_rows import PreferenceRows
from honing.methods.pair_losses import CPOLoss, ORPOLoss, PairLoss
from honing.methods.pairs import PairTrainModule
from honing.recipes.base import Recipe, train_module_options, use_chat_tokenizer
from honing.recipes.pair_parts import check_pair_attention, held_out_answers, packed_pairs, preference_rows

#: method → its section's type (the defaults when the section is absent)
SECTIONS: dict[str, type] = {"orpo": ORPOSection, "cpo": CPOSection}


class ReferenceFreeRecipe(Recipe):
    """Pairs → chat template (prompt with the generation prompt, completions the rest) → packed pair batches → the
    method's reference-free pair loss."""

    def __init__(self, config: Any):
        super().__init__(config)
        self.section = getattr(config, config.method) or SECTIONS[config.method]()
        self.packed_pairs = packed_pairs(config, self.section)

    def build_model_assets(self) -> list[Any]:
        """A byte-level or pretrained tokenizer with the run's chat template."""
        return use_chat_tokenizer(self)

    def row_kind(self) -> PreferenceRows:
        """Preference pairs through the chat template, batched by the pair collator."""
        return preference_rows(self)

    def build_data(self) -> RunData:
        """Pair batches (a flash kernel, which cannot take the pairs' mask, is refused first)."""
        check_pair_attention(self)
        return build_finetune_data(self.row_kind(), self.config.data, self.data_placement())

    def build_pair_loss(self) -> PairLoss:
        """The method's loss part from its section (a hook: return another ``PairLoss`` to train with it)."""
        cfg = self.section
        if self.config.method == "orpo":
            return ORPOLoss(beta=cfg.beta)
        return CPOLoss(
            beta=cfg.beta,
            loss_type=cfg.loss_type,
            label_smoothing=cfg.label_smoothing,
            cpo_alpha=cfg.cpo_alpha,
            simpo_gamma=cfg.simpo_gamma,
            alpha=cfg.alpha,
        )

    def build_train_module(self) -> PairTrainModule:
        """The pair step with the method's loss and no reference."""
        return PairTrainModule(
            self.model,
            self.build_optimizer(self.model),
            loss=self.build_pair_loss(),
            packed_pairs=self.packed_pairs,
            **train_module_options(self),
        )

    def held_out_answers(self) -> list[tuple[list[dict[str, Any]], str]]:
        """The validation prompts with their chosen reply's text (the answer the generation eval expects)."""
        return held_out_answers(self)
