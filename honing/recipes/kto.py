"""KTO: unpaired completions labelled desirable or undesirable (or preference pairs, each two such rows) in, the
policy trained against a reference to raise the first and lower the second (TRL's KTOTrainer).

Parts: a chat tokenizer, the KTO row kind (``honing.data.preference.kto_rows.KTORows``: each row batched as a pair,
``prompt | completion | mismatched completion``), the reference DPO has (``honing.recipes.pair_recipe``), and the
pair step with the KTO loss part (``honing.methods.kto.KTOTrainModule``).
"""

from __future__ import annotations

from honing.config import RunConfig
from honing.config.kto_schema import KTOSection
from honing.data.preference.kto_rows import KTOCollator, KTORows
from honing.methods.kto import KTOTrainModule
from honing.methods.kto_loss import KTOLoss
from honing.recipes.base import chat_rows, micro_batch_size
from honing.recipes.pair_recipe import PairRecipe
from honing.run.parts import HeldOutAnswers, ModelAssets


class KTORecipe(PairRecipe):
    """Rows → chat template (prompt with the generation prompt, the completion the rest) → rows with a mismatched
    completion, batched as pairs → the KTO loss against a frozen copy, the adapters-off model, or precomputed
    reference log-probs."""

    train_module_class = KTOTrainModule
    loss_class = KTOLoss  # beta, loss_type and the two weights, read from the kto section

    def __init__(self, config: RunConfig):
        self.kto: KTOSection = config.kto or KTOSection()  # its defaults when absent
        super().__init__(config, self.kto)

    def row_kind(self, assets: ModelAssets) -> KTORows:
        """KTO rows through the chat template, batched by the KTO collator."""
        pairing = self.kto.kl_pairing if self.kto.loss_type == "kto" else "none"
        collator = KTOCollator(
            assets.tokenizer.pad_token_id,
            additive_mask=self.models.attention_name() == "eager",
            kl_rows=micro_batch_size(self.config, self.parallel_dims) if pairing == "batch" else None,
            seq_len=self.config.data.seq_len,
        )
        seed = self.config.trainer.seed
        return chat_rows(KTORows, assets, self.config, self.cache_dir, collator=collator, seed=seed, mismatched=pairing)

    def held_out_answers(self, assets: ModelAssets) -> HeldOutAnswers:
        """The validation prompts with their desirable reply's text (the answer the generation eval expects)."""
        from honing.data.preference.kto_examples import read_example_sources
        from honing.data.text.corpus import split_documents

        data, seed, kind = self.config.data, self.config.trainer.seed, self.row_kind(assets)
        if data.validation is not None:
            found, _ = read_example_sources(kind.source_fields(data.validation.sources), bad_rows=data.bad_rows)
            examples = [example for source in found for example, _ in source]
        elif data.validation_split > 0:
            found, _ = read_example_sources(kind.source_fields(data.train.sources), bad_rows=data.bad_rows)
            held_out = split_documents([item for source in found for item in source], data.validation_split, seed=seed)
            examples = [example for example, _ in held_out[1]]
        else:
            examples = []
        return [(e.prompt, e.completion[0]["content"]) for e in examples if e.desirable and len(e.completion) == 1]
