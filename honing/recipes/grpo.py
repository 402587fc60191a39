"""GRPO: prompts in (conversations without their answer, or plain prompts), completions sampled by the policy,
scored by the rewards of ``grpo.rewards``, and TRL's group-relative policy-gradient update; full or LoRA.

Parts: a chat tokenizer, the prompt row kind (``honing.data.prompts.prompt_rows.PromptRows``), a frozen copy as the
KL reference (full fine-tuning with ``grpo.beta`` > 0; LoRA disables its adapters instead), the GRPO train module.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from honing.config.grpo_loss_schema import weighted_rewards
from honing.config.schema import GRPOSection
from honing.data.finetune_data import RunData, build_finetune_data
from honing.data.prompts.prompt_rows import PromptRows
from honing.data.prompts.prompts import load_prompts
from honing.distributed import print0
from honing.errors import DataError
from honing.models import is_lora
from honing.models.generation import end_of_turn_ids
from honing.recipes.base import Recipe, train_module_options, use_chat_tokenizer
from honing.recipes.grpo_batches import generation_steps, micro_batch_completions
from honing.recipes.grpo_sampling import dynamic_sampling, estimator_parts, rollout_section
from honing.recipes.grpo_validation import (
    reward_validation,
    wants_reward_validation,
    with_evaluation_before_training,
)
from honing.recipes.rollout_backend import rollout_sampler
from honing.recipes.tool_parts import refuse_unsupported_tool_use, tool_schemas, tool_turns
from honing.rl.rewards import RewardScorer


class GRPORecipe(Recipe):
    """A chat tokenizer and model (full or LoRA); prompts for data; GRPO's train module."""

    def __init__(self, config: Any):
        super().__init__(config)
        self.grpo: GRPOSection = rollout_section(config)  # or RLOO's section, for method: rloo
        refuse_unsupported_tool_use(config, self.grpo)

    def build_model_assets(self) -> list[Any]:
        """A byte-level or pretrained tokenizer with the run's chat template."""
        return use_chat_tokenizer(self)

    def compile_blockers(self) -> list[str]:
        """Rollouts decode in the step: each new length would recompile the blocks."""
        return ["the rollouts' decoding"]

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
            tools=tool_schemas(self.grpo, self.config.method, self.tokenizer),
            printer=print0,
        )

    def build_data(self) -> RunData:
        """A resumable loader of left-padded prompts, and the held-out prompts the evaluator samples and scores."""
        validation = wants_reward_validation(self.config)
        return build_finetune_data(self.row_kind(), self.config.data, self.data_placement(), validation=validation)

    def build_train_module(self) -> Any:
        """GRPO's train module (RLOO's for ``method: rloo``) with the rewards of ``grpo.rewards``."""
        grpo, tokenizer = self.grpo, self.tokenizer
        stop = [int(i) for i in (tokenizer.eos_token_id, *end_of_turn_ids(tokenizer)) if i is not None]
        reference = self.reference_model
        if reference is not None:
            reference = reference.to(self.device)
        train_module, estimator = self.estimator_parts()
        return train_module(
            self.model,
            self.build_optimizer(self.model),
            tokenizer=tokenizer,
            scorer=RewardScorer(weighted_rewards(grpo)),
            stop_token_ids=stop,
            num_generations=grpo.num_generations,
            max_completion_length=grpo.max_completion_length,
            temperature=grpo.temperature,
            top_p=grpo.top_p,
            top_k=grpo.top_k,
            beta=grpo.beta,
            epsilon=grpo.epsilon,
            epsilon_high=grpo.epsilon_high,
            num_iterations=grpo.num_iterations,
            steps_per_generation=generation_steps(self.config, grpo, self.parallel_dims.dp_size),
            micro_batch_completions=micro_batch_completions(self.config, grpo, self.parallel_dims.dp_size),
            reference_model=reference,
            seed=self.config.trainer.seed,
            sample_interval=grpo.sample_interval,
            validation=reward_validation(self),
            rollout_sampler=rollout_sampler(grpo, self.config.method),
            tool_turns=tool_turns(self, grpo, stop),
            **estimator,
            **dynamic_sampling(self, grpo),
            **train_module_options(self),
        )

    def estimator_parts(self) -> tuple[type, dict[str, Any]]:
        """The train module class and the settings only its estimator reads (``recipes.grpo_sampling``)."""
        return estimator_parts(self.config.method, self.grpo)

    def build_callbacks(self) -> dict[str, Any]:
        """The registered callbacks, and an evaluation before training where ``grpo.validation`` asks for one."""
        return with_evaluation_before_training(super().build_callbacks(), self.grpo)

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
