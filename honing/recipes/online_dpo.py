"""Online DPO (``method: online_dpo``, TRL's OnlineDPOTrainer): prompts in, two completions per prompt sampled by the
current policy, ranked by the rewards of ``online_dpo.rewards`` (functions or ``reward_model:PATH``) or by a pairwise
``online_dpo.judge``, and DPO's loss of each pair against the starting policy; full or LoRA.

Parts: GRPO's (a chat tokenizer, the prompt row kind, rollouts, held-out prompts scored by the rewards at each
evaluation), a frozen copy of the policy as the reference (LoRA: its adapters off instead), the online DPO train
module (``honing.methods.online_dpo``).
"""

from __future__ import annotations

import torch

from honing.config import RunConfig
from honing.config.grpo_loss_schema import weighted_rewards
from honing.data.prompts.prompt_rows import PromptRows
from honing.errors import ConfigError
from honing.methods.grpo_settings import RolloutParts
from honing.methods.online_dpo import NoRewards, OnlineDPOTrainModule
from honing.recipes.base import Recipe, stop_token_ids, train_module_options
from honing.recipes.grpo import GRPORecipe, on_device, policy_copy, prompt_rows
from honing.recipes.grpo_validation import reward_validation
from honing.rl.imports import import_callable
from honing.rl.rewards import RewardScorer
from honing.run.parts import ModelAssets, TrainInputs


class OnlineDPORecipe(GRPORecipe):
    """GRPO's tokenizer, prompts and sampling; a reference copy; the online DPO train module."""

    def __init__(self, config: RunConfig):
        Recipe.__init__(self, config)  # GRPO's reads tools and vLLM keys that online DPO's section has not
        if config.online_dpo is None:
            raise ConfigError(
                "online_dpo: method 'online_dpo' needs an online_dpo section, at least online_dpo.rewards: "
                "[{name: ...}] or online_dpo.judge"
            )
        self.grpo = config.online_dpo  # the name GRPO's shared steps (held-out scoring, callbacks) read
        if not self.grpo.rewards and self.grpo.judge is None:
            raise ConfigError(
                "online_dpo: give rewards to rank the two completions (online_dpo.rewards: [{name: ...}], e.g. "
                "reward_model:runs/reward/hf) or a pairwise judge (online_dpo.judge: package.module:function)"
            )
        if not self.grpo.rewards and config.data.validation is not None and config.callbacks.evaluator.enabled:
            raise ConfigError(
                "online_dpo.judge: the held-out prompts of data.validation are scored by online_dpo.rewards, and a "
                "judge alone gives none; add online_dpo.rewards, remove data.validation, or set "
                "callbacks.evaluator.enabled: false"
            )

    def build_reference_model(self, model: torch.nn.Module, assets: ModelAssets) -> torch.nn.Module | None:
        """A frozen copy of the policy as built; None with LoRA (its adapters are disabled instead)."""
        return policy_copy(model, wanted=True)

    def row_kind(self, assets: ModelAssets) -> PromptRows:
        """Prompts rendered with the chat template's generation prompt, each leaving ``max_new_tokens``."""
        return prompt_rows(
            assets, self.config, self.cache_dir, max_completion_length=self.grpo.max_new_tokens, num_generations=2
        )

    def build_train_module(self, inputs: TrainInputs) -> OnlineDPOTrainModule:
        """The online DPO train module, its pairs ranked by the rewards or the judge."""
        section, tokenizer, seed = self.grpo, inputs.assets.tokenizer, self.config.trainer.seed
        if section.rewards:
            scorer: RewardScorer | NoRewards = RewardScorer(weighted_rewards(section), key="online_dpo.rewards")
        else:
            scorer = NoRewards()
        judge = None
        if section.judge is not None:
            judge = import_callable(section.judge, key="online_dpo.judge", kind="judge")
        optimizer = self.build_optimizer(inputs.model)
        parts = RolloutParts(
            tokenizer=tokenizer,
            scorer=scorer,
            stop_token_ids=stop_token_ids(tokenizer),
            seed=seed,
            reference_model=on_device(inputs.reference_model, self.device),
            validation=reward_validation(inputs.data.eval_batches, section, seed) if section.rewards else None,
        )
        return OnlineDPOTrainModule(
            inputs.model,
            optimizer,
            section,
            parts,
            judge=judge,
            **train_module_options(self.config, self.placement, inputs.data.collator),
        )
