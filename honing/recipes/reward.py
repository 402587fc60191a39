"""A reward model: preference pairs in, a one-label sequence-classification head on the model's body trained to score
the chosen sequence above the rejected one (TRL's RewardTrainer), exported as a Hugging Face sequence classifier.

Parts: a chat tokenizer, the reward row kind (``honing.data.preference.reward_rows.RewardRows``: DPO's pairs with
their ``margin``), the one-label model (``honing.models.score_head``), and the pair step with sequence rewards
(``honing.methods.reward.RewardTrainModule``) and its loss part (``honing.methods.reward_loss.RewardLoss``). ``hf/``
loads with ``AutoModelForSequenceClassification``; ``reward_model:SAVE_FOLDER/hf`` makes it a GRPO reward.
"""

from __future__ import annotations

from typing import Any

import torch

from honing.config.reward_schema import RewardSection
from honing.data.finetune_data import RunData, build_finetune_data
from honing.data.preference.batches import PairCollator
from honing.data.preference.reward_rows import RewardRows
from honing.distributed import print0
from honing.methods.reward import RewardTrainModule
from honing.methods.reward_loss import RewardLoss
from honing.models.parallel import fsdp_shards
from honing.models.score_head import build_reward_model
from honing.recipes.base import Recipe, train_module_options, use_chat_tokenizer
from honing.recipes.pair_parts import check_pair_attention, packed_pairs
from honing.run.callbacks import build_callbacks


class RewardRecipe(Recipe):
    """Pairs → chat template (prompt with the generation prompt, completions the rest) → packed pair batches → a
    one-label score head's reward of each sequence → Bradley–Terry loss."""

    def __init__(self, config: Any):
        super().__init__(config)
        self.section = config.reward or RewardSection()  # its defaults when absent
        self.packed_pairs = packed_pairs(config, self.section)

    def build_model_assets(self) -> list[Any]:
        """A byte-level or pretrained tokenizer with the run's chat template."""
        return use_chat_tokenizer(self)

    def build_model(self) -> torch.nn.Module:
        """``AutoModelForSequenceClassification`` with one label from ``model.name_or_path`` or ``model.config``
        (LoRA: peft's ``SEQ_CLS`` task, the new head trained whole)."""
        shards = fsdp_shards(self.config.parallel.strategy, self.parallel_dims)
        return build_reward_model(self.models, self.tokenizer, max_length=self.config.data.seq_len, shards=shards)

    def row_kind(self) -> RewardRows:
        """Preference pairs and their margins through the chat template, batched by the pair collator."""
        collator = PairCollator(self.tokenizer.pad_token_id, additive_mask=self.models.attention_name() == "eager")
        return RewardRows(
            self.tokenizer,
            self.chat_template,
            self.config.data,
            cache_dir=self.cache_dir,
            collator=collator,
            printer=print0,
        )

    def build_data(self) -> RunData:
        """Pair batches (a flash kernel, which cannot take the pairs' mask, is refused first)."""
        check_pair_attention(self)
        return build_finetune_data(self.row_kind(), self.config.data, self.data_placement())

    def build_callbacks(self) -> dict[str, Any]:
        """The registered callbacks but the text samples (a score head generates no text)."""
        callbacks = build_callbacks(self)
        callbacks.pop("sample", None)
        return callbacks

    def build_pair_loss(self) -> RewardLoss:
        """The loss part from the ``reward`` section (a hook: return another ``PairLoss`` over rewards to train it)."""
        return RewardLoss(center_rewards_coefficient=self.section.center_rewards_coefficient)

    def build_train_module(self) -> RewardTrainModule:
        """The pair step over sequence rewards, with the reward loss and no reference."""
        return RewardTrainModule(
            self.model,
            self.build_optimizer(self.model),
            loss=self.build_pair_loss(),
            packed_pairs=self.packed_pairs,
            **train_module_options(self),
        )
