"""GRPO: prompts in (conversations without their answer, or plain prompts), completions sampled by the policy,
scored by the rewards of ``grpo.rewards``, and TRL's group-relative policy-gradient update; full or LoRA.

Parts: a chat tokenizer, the prompt row kind (``honing.data.prompts.prompt_rows.PromptRows``), a frozen copy as the
KL reference (full fine-tuning with ``grpo.beta`` > 0; LoRA disables its adapters instead), the GRPO train module.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from honing.config import RunConfig
from honing.config.grpo_loss_schema import weighted_rewards
from honing.config.schema import GRPOSection
from honing.data.finetune_data import RunData
from honing.data.prompts.prompt_rows import PromptRows
from honing.data.prompts.prompts import load_prompts
from honing.errors import DataError
from honing.methods.base import BaseTrainModule
from honing.methods.grpo_settings import RolloutParts
from honing.models import is_lora
from honing.plan.rollout_batch import generation_steps, micro_batch_completions, shared_groups
from honing.recipes.base import Recipe, chat_assets, chat_rows, finetune_data, stop_token_ids, train_module_options
from honing.recipes.grpo_batches import shared_prompts_data
from honing.recipes.grpo_sampling import estimator_parts, refill_prompts, rollout_section
from honing.recipes.grpo_validation import (
    reward_validation,
    wants_reward_validation,
    with_evaluation_before_training,
)
from honing.recipes.rollout_backend import rollout_sampler
from honing.recipes.tool_parts import refuse_unsupported_tool_use, tool_schemas, tool_turns
from honing.rl.rewards import RewardScorer
from honing.run.parts import HeldOutAnswers, ModelAssets, RunParts, TrainInputs
from honing.train import Callback


def policy_copy(model: torch.nn.Module, *, wanted: bool) -> torch.nn.Module | None:
    """A frozen copy of the policy as built, the rollout methods' KL reference; None when the method needs none
    (``wanted`` false) or with LoRA (its adapters are disabled instead)."""
    if not wanted or is_lora(model):
        return None
    return copy.deepcopy(model).eval().requires_grad_(False)


def prompt_rows(
    assets: ModelAssets,
    config: RunConfig,
    cache_dir: str,
    *,
    max_completion_length: int,
    num_generations: int,
    tools: list[dict[str, Any]] | None = None,
) -> PromptRows:
    """The rollout methods' row kind: prompts rendered with the chat template's generation prompt, each leaving
    ``max_completion_length`` tokens for its ``num_generations`` completions (``tools``: schemas shown with it)."""
    return chat_rows(
        PromptRows,
        assets,
        config,
        cache_dir,
        max_completion_length=max_completion_length,
        num_generations=num_generations,
        tools=tools,
    )


def on_device(model: torch.nn.Module | None, device: torch.device) -> torch.nn.Module | None:
    """``model`` moved to the run's device (None stays None)."""
    return model.to(device) if model is not None else None


class GRPORecipe(Recipe):
    """A chat tokenizer and model (full or LoRA); prompts for data; GRPO's train module."""

    def __init__(self, config: RunConfig):
        super().__init__(config)
        self.grpo: GRPOSection = rollout_section(config)  # or RLOO's section, for method: rloo
        refuse_unsupported_tool_use(config, self.grpo)

    def model_assets(self) -> ModelAssets:
        """A byte-level or pretrained tokenizer with the run's chat template."""
        return chat_assets(self.config)

    def compile_blockers(self) -> list[str]:
        """Rollouts decode in the step: each new length would recompile the blocks."""
        return ["the rollouts' decoding"]

    def build_reference_model(self, model: torch.nn.Module, assets: ModelAssets) -> torch.nn.Module | None:
        """A frozen copy of the policy as built (``grpo.beta`` > 0, full fine-tuning); None with LoRA (its adapters
        are disabled instead) or beta = 0 (no KL term)."""
        return policy_copy(model, wanted=self.grpo.beta != 0.0)

    def row_kind(self, assets: ModelAssets) -> PromptRows:
        """Prompts rendered with the chat template's generation prompt."""
        return prompt_rows(
            assets,
            self.config,
            self.cache_dir,
            max_completion_length=self.grpo.max_completion_length,
            num_generations=self.grpo.num_generations,
            tools=tool_schemas(self.grpo, self.config.method, assets.tokenizer),
        )

    def build_data(self, assets: ModelAssets, model: torch.nn.Module | None = None) -> RunData:
        """A resumable loader of left-padded prompts, and the held-out prompts the evaluator samples and scores."""
        validation = wants_reward_validation(self.config)
        kind = self.row_kind(assets)
        shared = shared_groups(self.config, self.grpo, self.parallel_dims)  # grpo.completions_per_rank
        if shared is not None:  # every rank reads the step's prompts; its pairs of them are sampled
            return shared_prompts_data(
                kind, self.config, self.parallel_dims, self.cache_dir, shared, validation=validation
            )
        return finetune_data(kind, self.config, self.parallel_dims, self.cache_dir, validation=validation)

    def build_train_module(self, inputs: TrainInputs) -> BaseTrainModule:
        """GRPO's train module (RLOO's for ``method: rloo``) over the ``grpo`` section, with the rewards of
        ``grpo.rewards``."""
        grpo, tokenizer, seed = self.grpo, inputs.assets.tokenizer, self.config.trainer.seed
        dp_size = self.parallel_dims.dp_size
        shared = shared_groups(self.config, grpo, self.parallel_dims)  # a group may span ranks: checked there
        if shared is None:
            generation_steps(self.config, grpo, dp_size)  # the batch checks that need the data-parallel size
            micro_batch_completions(self.config, grpo, dp_size)
        else:  # the per-rank forward: the key, or a rank's whole optimizer step
            grpo = grpo.model_copy(update={"micro_batch_completions": shared.forward_completions(grpo)})
        stop = stop_token_ids(tokenizer)
        train_module, options = self.estimator_parts(inputs.assets)
        optimizer = self.build_optimizer(inputs.model)
        parts = RolloutParts(
            tokenizer=tokenizer,
            scorer=RewardScorer(weighted_rewards(grpo)),
            stop_token_ids=stop,
            seed=seed,
            reference_model=on_device(inputs.reference_model, self.device),
            validation=reward_validation(inputs.data.eval_batches, grpo, seed),
            rollout_sampler=rollout_sampler(grpo, self.config.method),
            tool_turns=tool_turns(inputs.assets, grpo, self.config.method, stop, self.config.data.chat_template_kwargs),
            refill_prompts=refill_prompts(inputs.data.train_loader, grpo, seed),
            completions=None if shared is None else shared.pairs,
        )
        step_options = train_module_options(self.config, self.placement, inputs.data.collator)
        if shared is not None:  # the held-out prompts' forward (the training one is micro_batch_completions)
            step_options["micro_batch_size"] = shared.prompts
        return train_module(inputs.model, optimizer, grpo, parts, **options, **step_options)

    def estimator_parts(self, assets: ModelAssets) -> tuple[type[BaseTrainModule], dict[str, Any]]:
        """The train module class and what it takes beside its section and parts (``recipes.grpo_sampling``)."""
        return estimator_parts(self.config.method, self.grpo), {}

    def build_callbacks(self, parts: RunParts) -> dict[str, Callback]:
        """The registered callbacks, and an evaluation before training where ``grpo.validation`` asks for one."""
        return with_evaluation_before_training(super().build_callbacks(parts), self.grpo)

    def held_out_answers(self, assets: ModelAssets) -> HeldOutAnswers:
        """The ``data.validation`` prompts as (messages, their ``answer`` column) for the generation eval: the
        held-out words a verifiable reward checks, answered greedily before and after training."""
        data = self.config.data
        if data.validation is None:
            return []
        fields = self.row_kind(assets).source_fields(data.validation.sources)
        prompts = load_prompts(fields, seed=self.config.trainer.seed)
        answerable = [p for p, _ in prompts if p.is_conversational and isinstance(p.columns.get("answer"), str)]
        if len(answerable) < len(prompts):
            raise DataError(
                f"data.validation: {len(prompts) - len(answerable)} of {len(prompts)} prompts cannot be checked by "
                "callbacks.generation_eval; expected conversations whose last assistant turn (or 'answer' column) "
                "is the expected answer"
            )
        return [(p.prompt, p.columns["answer"]) for p in answerable]
