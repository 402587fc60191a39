"""GRPO: prompts in (conversations without their answer, or plain prompts), completions sampled by the policy,
scored by the rewards of ``grpo.rewards``, and TRL's group-relative policy-gradient update; full or LoRA.

Parts: a chat tokenizer, the prompt row kind (``honing.data.prompts.prompt_rows.PromptRows``), a frozen copy as the
KL reference (full fine-tuning with ``grpo.beta`` > 0; LoRA disables its adapters instead), the GRPO train module.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from honing.config.schema import GRPOSection
from honing.data.finetune_data import RunData, build_finetune_data
from honing.data.prompts.prompt_rows import PromptRows
from honing.data.prompts.prompts import load_prompts
from honing.distributed import print0
from honing.errors import ConfigError, DataError
from honing.models import is_lora
from honing.models.generation import end_of_turn_ids
from honing.recipes.base import Recipe, train_module_options, use_chat_tokenizer
from honing.rl.rewards import RewardScorer


class GRPORecipe(Recipe):
    """A chat tokenizer and model (full or LoRA); prompts for data; GRPO's train module."""

    def __init__(self, config: Any):
        super().__init__(config)
        if config.grpo is None:
            raise ConfigError("grpo: method 'grpo' needs a grpo section, at least grpo.rewards: [{name: ...}]")
        self.grpo: GRPOSection = config.grpo

    def build_model_assets(self) -> list[Any]:
        """A byte-level or pretrained tokenizer with the run's chat template."""
        return use_chat_tokenizer(self)

    def build_reference_model(self, model: torch.nn.Module) -> torch.nn.Module | None:
        """A frozen copy of the policy as built (``grpo.beta`` > 0, full fine-tuning); None with LoRA (its adapters
        are disabled instead) or beta = 0 (no KL term)."""
        if self.grpo.beta == 0.0 or is_lora(model):
            return None
        return copy.deepcopy(model).eval().requires_grad_(False)

    def row_kind(self) -> PromptRows:
        """Prompts rendered with the chat template's generation prompt."""
        return PromptRows(
            self.tokenizer,
            self.chat_template,
            self.config.data,
            cache_dir=self.cache_dir,
            max_completion_length=self.grpo.max_completion_length,
            num_generations=self.grpo.num_generations,
            printer=print0,
        )

    def build_data(self) -> RunData:
        """A resumable loader of left-padded prompts (no validation loss: the reward is logged every step)."""
        if self.config.data.validation is not None and not self.config.callbacks.generation_eval.enabled:
            raise ConfigError(
                "data.validation: method 'grpo' reads held-out prompts only for callbacks.generation_eval "
                "(exact match of greedy answers); enable it or remove data.validation"
            )
        return build_finetune_data(self.row_kind(), self.config.data, self.data_placement(), validation=False)

    def build_train_module(self) -> Any:
        """GRPO's train module with the rewards of ``grpo.rewards``."""
        from honing.methods.grpo import GRPOTrainModule

        grpo, tokenizer = self.grpo, self.tokenizer
        stop = [int(i) for i in (tokenizer.eos_token_id, *end_of_turn_ids(tokenizer)) if i is not None]
        reference = self.reference_model
        if reference is not None:
            reference = reference.to(self.device)
        return GRPOTrainModule(
            self.model,
            self.build_optimizer(self.model),
            tokenizer=tokenizer,
            scorer=RewardScorer([(reward.name, reward.weight) for reward in grpo.rewards]),
            stop_token_ids=stop,
            num_generations=grpo.num_generations,
            max_completion_length=grpo.max_completion_length,
            temperature=grpo.temperature,
            top_p=grpo.top_p,
            top_k=grpo.top_k,
            beta=grpo.beta,
            epsilon=grpo.epsilon,
            epsilon_high=grpo.epsilon_high,
            loss_type=grpo.loss_type,
            scale_rewards=grpo.scale_rewards,
            num_iterations=grpo.num_iterations,
            reference_model=reference,
            seed=self.config.trainer.seed,
            sample_interval=grpo.sample_interval,
            **train_module_options(self),
        )

    def held_out_answers(self) -> list[tuple[Any, str]]:
        """The ``data.validation`` prompts as (messages, their ``answer`` column) for the generation eval: the
        held-out words a verifiable reward checks, answered greedily before and after training."""
        data = self.config.data
        if data.validation is None:
            return []
        fields = self.row_kind().source_fields(data.validation.sources)
        prompts = load_prompts(fields, seed=self.config.trainer.seed)
        answerable = [p for p, _ in prompts if p.is_conversational and isinstance(p.columns.get("answer"), str)]
        if len(answerable) < len(prompts):
            raise DataError(
                f"data.validation: {len(prompts) - len(answerable)} of {len(prompts)} prompts cannot be checked by "
                "callbacks.generation_eval; expected conversations whose last assistant turn (or 'answer' column) "
                "is the expected answer"
            )
        return [(p.prompt, p.columns["answer"]) for p in answerable]
