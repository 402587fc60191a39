"""PPO (TRL's PPOTrainer): prompts in, one completion per prompt sampled by the policy, scored by a reward model
(``method: reward``'s export) and / or GRPO's reward functions, a value model trained beside the policy; full or
LoRA (the value model trains whole, as TRL's).

Parts: GRPO's chat tokenizer, prompt rows, rollouts, held-out reward validation and reference (a frozen copy, or the
LoRA model with its adapters off), the value model (``ppo.value_model_path``, else the reward model's, else the
policy's weights with a new scalar head) and the PPO train module (``honing.methods.ppo``).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import torch

from honing.config import RunConfig
from honing.config.grpo_loss_schema import weighted_rewards
from honing.data.finetune_data import RunData
from honing.data.prompts.prompt_rows import PromptRows
from honing.errors import ConfigError
from honing.methods.grpo_settings import RolloutParts
from honing.methods.ppo_value import ValueModel
from honing.models import is_lora
from honing.models.wrappers import unwrap_model
from honing.recipes.base import (
    Recipe,
    chat_assets,
    finetune_data,
    micro_batch_size,
    stop_token_ids,
    train_module_options,
)
from honing.recipes.grpo import GRPORecipe, on_device, policy_copy, prompt_rows
from honing.recipes.grpo_sampling import rollout_section
from honing.recipes.grpo_validation import reward_validation, wants_reward_validation, with_evaluation_before_training
from honing.rl.rewards import RewardScorer
from honing.run.parts import HeldOutAnswers, ModelAssets, RunParts, TrainInputs
from honing.train import Callback

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from honing.config.ppo_schema import PPOSection
    from honing.methods.ppo import PPOTrainModule


class PPORecipe(Recipe):
    """A chat tokenizer and policy (full or LoRA); prompts for data; a value model; PPO's train module."""

    def __init__(self, config: RunConfig):
        super().__init__(config)
        self.ppo = rollout_section(config)
        self.grpo = self.ppo  # what GRPO's shared parts read: the rewards and the validation settings
        if not self.ppo.rewards and self.ppo.reward_model_path is None:
            raise ConfigError("ppo: give ppo.reward_model_path or ppo.rewards: [{name: ...}] (or both)")
        if config.trainer.precision == "fp16-mixed":
            raise ConfigError("trainer.precision: fp16-mixed does not scale the PPO value model's loss; use bf16-mixed")

    def model_assets(self) -> ModelAssets:
        """A byte-level or pretrained tokenizer with the run's chat template."""
        return chat_assets(self.config)

    def compile_blockers(self) -> list[str]:
        """Rollouts decode in the step: each new length would recompile the blocks."""
        return ["the rollouts' decoding"]

    def build_reference_model(self, model: torch.nn.Module, assets: ModelAssets) -> torch.nn.Module | None:
        """A frozen copy of the policy as built (``ppo.kl_coef`` > 0, full fine-tuning); None with LoRA (its adapters
        are disabled instead) or kl_coef = 0."""
        return policy_copy(model, wanted=self.ppo.kl_coef != 0.0)

    def row_kind(self, assets: ModelAssets) -> PromptRows:
        """Prompts rendered with the chat template's generation prompt, one completion each."""
        return prompt_rows(
            assets, self.config, self.cache_dir, max_completion_length=self.ppo.response_length, num_generations=1
        )

    def build_data(self, assets: ModelAssets, model: torch.nn.Module | None = None) -> RunData:
        """A resumable loader of left-padded prompts, and the held-out prompts the evaluator samples and scores."""
        validation = wants_reward_validation(self.config)
        if validation and not self.ppo.rewards:
            raise ConfigError(
                "data.validation: PPO scores held-out prompts with ppo.rewards, which is empty (the reward model "
                "scores training rollouts only); add a reward function to ppo.rewards or remove data.validation"
            )
        kind = self.row_kind(assets)
        return finetune_data(kind, self.config, self.parallel_dims, self.cache_dir, validation=validation)

    def stop_token_ids(self, tokenizer: PreTrainedTokenizerBase) -> list[int]:
        """Where a completion ends: ``stop_token: eos`` the end-of-sequence and end-of-turn tokens, or
        ``stop_token_id``, or nowhere (TRL's default: ``response_length`` tokens)."""
        if self.ppo.stop_token_id is not None:
            return [self.ppo.stop_token_id]
        if self.ppo.stop_token == "eos":
            return stop_token_ids(tokenizer)
        return []

    def sequence_classifier(
        self, path: str | None, policy_model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
    ) -> torch.nn.Module:
        """A sequence classifier with one label from ``path``, or (None) the policy's weights with a new head."""
        from transformers import AutoModelForSequenceClassification

        if path is not None:
            model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
        else:
            policy = unwrap_model(policy_model)
            if is_lora(policy):
                policy = policy.get_base_model()
            torch.manual_seed(self.config.trainer.seed)  # the new head's start
            config = copy.deepcopy(policy.config)
            config.num_labels = 1
            model = AutoModelForSequenceClassification.from_config(config)
            prefix = f"{model.base_model_prefix}."
            body = {}
            for key, value in policy_weights(policy_model).items():
                key = key.removeprefix("base_model.model.").replace("base_layer.", "")  # a LoRA model's names
                if key.startswith(prefix) and "lora_" not in key:
                    body[key.removeprefix(prefix)] = value
            getattr(model, model.base_model_prefix).load_state_dict(body)
        model.config.pad_token_id = tokenizer.pad_token_id
        return model.to(self.device, torch.float32)

    def build_train_module(self, inputs: TrainInputs) -> PPOTrainModule:
        """PPO's train module with the reward model, the value model and the rewards of ``ppo.rewards``."""
        from honing.methods.ppo import PPOTrainModule

        ppo, tokenizer, policy = self.ppo, inputs.assets.tokenizer, inputs.model
        rows = self.config.data.rows_per_step(self.parallel_dims.dp_size) // self.parallel_dims.dp_size
        if rows % ppo.num_mini_batches or (rows // ppo.num_mini_batches) % micro_batch_size(
            self.config, self.parallel_dims
        ):
            raise ConfigError(
                f"ppo.num_mini_batches ({ppo.num_mini_batches}) must divide each rank's rollout batch ({rows} "
                "prompts) into mini-batches of whole data.micro_batch_size micro-batches; change one of them"
            )
        reward_model = None
        if ppo.reward_model_path is not None:
            reward_model = self.sequence_classifier(ppo.reward_model_path, policy, tokenizer)
            reward_model = reward_model.eval().requires_grad_(False)
        value_model = self.sequence_classifier(ppo.value_model_path or ppo.reward_model_path, policy, tokenizer)
        value = ValueModel(
            value_model.train(), self.build_optimizer(value_model), grad_clip=self.config.optim.grad_clip
        )
        seed, optimizer = self.config.trainer.seed, self.build_optimizer(policy)
        parts = RolloutParts(
            tokenizer=tokenizer,
            scorer=ppo_scorer(ppo),
            stop_token_ids=self.stop_token_ids(tokenizer),
            seed=seed,
            reference_model=on_device(inputs.reference_model, self.device),
            validation=reward_validation(inputs.data.eval_batches, ppo, seed),
        )
        return PPOTrainModule(
            policy,
            optimizer,
            ppo,
            parts,
            value=value,
            reward_model=reward_model,
            held_out_scorer=RewardScorer(weighted_rewards(ppo), key="ppo.rewards")
            if ppo.reward_model_path and ppo.rewards
            else None,
            **train_module_options(self.config, self.placement, inputs.data.collator),
        )

    def build_callbacks(self, parts: RunParts) -> dict[str, Callback]:
        """The registered callbacks, and an evaluation before training where ``ppo.validation`` asks for one."""
        return with_evaluation_before_training(super().build_callbacks(parts), self.ppo)

    def held_out_answers(self, assets: ModelAssets) -> HeldOutAnswers:
        """The ``data.validation`` prompts with their ``answer`` column, as GRPO's (the generation eval's)."""
        return GRPORecipe.held_out_answers(self, assets)  # type: ignore[arg-type]


def ppo_scorer(section: PPOSection) -> RewardScorer:
    """The reward functions of ``ppo.rewards`` and, with ``ppo.reward_model_path``, a last column ``reward_model``
    (weight 1) that the train module fills with the reward model's scores."""
    rewards = weighted_rewards(section)
    if section.reward_model_path is None:
        return RewardScorer(rewards, key="ppo.rewards")
    scorer = RewardScorer([*rewards, ("honing.methods.ppo_value:unscored", 1.0)], key="ppo.rewards")
    scorer.names[-1] = "reward_model"
    return scorer


def policy_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The policy's whole weights on the CPU, under its names (gathered on every rank from FSDP2's shards)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    # cpu_offload would leave every rank but 0 an empty dict: each rank gathers the full tensors, then moves them
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    return {key: value.detach().cpu() for key, value in state.items()}
