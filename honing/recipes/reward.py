"""A reward model: preference pairs in, a one-label sequence-classification head on the model's body trained to score
the chosen sequence above the rejected one (TRL's RewardTrainer), exported as a Hugging Face sequence classifier.

Parts: a chat tokenizer, the reward row kind (``honing.data.preference.reward_rows.RewardRows``: DPO's pairs with
their ``margin``), the one-label model (``honing.models.score_head``), and the pair step with sequence rewards
(``honing.methods.reward.RewardTrainModule``) and its loss part (``honing.methods.reward_loss.RewardLoss``). ``hf/``
loads with ``AutoModelForSequenceClassification``; ``reward_model:SAVE_FOLDER/hf`` makes it a GRPO reward.
"""

from __future__ import annotations

import torch

from honing.config import RunConfig
from honing.config.reward_schema import RewardSection
from honing.data.preference.batches import PairCollator
from honing.data.preference.reward_rows import RewardRows
from honing.distributed import print0
from honing.methods.reward import RewardTrainModule
from honing.methods.reward_loss import RewardLoss
from honing.models.parallel import fsdp_shards
from honing.models.score_head import build_reward_model
from honing.recipes.pair_recipe import PairRecipe
from honing.run.callbacks import build_callbacks
from honing.run.parts import ModelAssets, RunParts, TrainInputs
from honing.train import Callback


class RewardRecipe(PairRecipe):
    """Pairs → chat template (prompt with the generation prompt, completions the rest) → packed pair batches → a
    one-label score head's reward of each sequence → Bradley–Terry loss."""

    def __init__(self, config: RunConfig):
        super().__init__(config, config.reward or RewardSection())  # its defaults when absent

    def build_model(self, assets: ModelAssets) -> torch.nn.Module:
        """``AutoModelForSequenceClassification`` with one label from ``model.name_or_path`` or ``model.config``
        (LoRA: peft's ``SEQ_CLS`` task, the new head trained whole)."""
        shards = fsdp_shards(self.config.parallel.strategy, self.parallel_dims)
        return build_reward_model(self.models, assets.tokenizer, max_length=self.config.data.seq_len, shards=shards)

    def row_kind(self, assets: ModelAssets) -> RewardRows:
        """Preference pairs and their margins through the chat template, batched by the pair collator."""
        collator = PairCollator(assets.tokenizer.pad_token_id, additive_mask=self.models.attention_name() == "eager")
        return RewardRows(
            assets.tokenizer,
            assets.chat_template,
            self.config.data,
            cache_dir=self.cache_dir,
            collator=collator,
            printer=print0,
        )

    def build_callbacks(self, parts: RunParts) -> dict[str, Callback]:
        """The registered callbacks but the text samples (a score head generates no text)."""
        callbacks = build_callbacks(parts)
        callbacks.pop("sample", None)
        return callbacks

    def build_pair_loss(self) -> RewardLoss:
        """The loss part from the ``reward`` section (a hook: return another ``PairLoss`` over rewards to train it)."""
        return RewardLoss(center_rewards_coefficient=self.section.center_rewards_coefficient)

    def build_train_module(self, inputs: TrainInputs) -> RewardTrainModule:
        """The pair step over sequence rewards, with the reward loss and no reference."""
        return RewardTrainModule(
            inputs.model,
            self.build_optimizer(inputs.model),
            loss=self.build_pair_loss(),
            packed_pairs=self.packed_pairs,
            **self.train_module_options(inputs.data.collator),
        )
