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
from honing.data.preference.reward_rows import RewardRows
from honing.methods.reward import RewardTrainModule
from honing.methods.reward_loss import RewardLoss
from honing.models.parallel import fsdp_shards
from honing.models.score_head import build_reward_model
from honing.recipes.pair_parts import preference_rows
from honing.recipes.pair_recipe import PairRecipe
from honing.run.callbacks import build_callbacks
from honing.run.parts import ModelAssets, RunParts
from honing.train import Callback


class RewardRecipe(PairRecipe):
    """Pairs → chat template (prompt with the generation prompt, completions the rest) → packed pair batches → a
    one-label score head's reward of each sequence → Bradley–Terry loss."""

    train_module_class = RewardTrainModule
    loss_class = RewardLoss  # center_rewards_coefficient, read from the reward section

    def __init__(self, config: RunConfig):
        super().__init__(config, config.reward or RewardSection())  # its defaults when absent

    def build_model(self, assets: ModelAssets) -> torch.nn.Module:
        """``AutoModelForSequenceClassification`` with one label from ``model.name_or_path`` or ``model.config``
        (LoRA: peft's ``SEQ_CLS`` task, the new head trained whole)."""
        shards = fsdp_shards(self.config.parallel.strategy, self.parallel_dims)
        return build_reward_model(self.models, assets.tokenizer, max_length=self.config.data.seq_len, shards=shards)

    def row_kind(self, assets: ModelAssets) -> RewardRows:
        """Preference pairs and their margins through the chat template, batched by the pair collator."""
        attention = self.models.attention_name()
        return preference_rows(assets, self.config, cache_dir=self.cache_dir, attention=attention, kind=RewardRows)

    def build_callbacks(self, parts: RunParts) -> dict[str, Callback]:
        """The registered callbacks but the text samples (a score head generates no text)."""
        callbacks = build_callbacks(parts)
        callbacks.pop("sample", None)
        return callbacks
