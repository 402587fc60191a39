"""GRPO TrainModule: each step samples G completions per prompt, scores them, and takes the group-relative
policy-gradient step (TRL's GRPOTrainer maths, ``honing.losses``), inside the same loop as every method.

A step is one rollout batch: the loader's prompts are generated from (rows of each rank's batch, G completions
each), scored by the rewards, turned into advantages, cut into ``steps_per_generation`` optimizer steps of whole
groups and trained on ``num_iterations`` times (every optimizer step but the last inside ``train_batch``, the last
one the loop's ``optim_step``; verl's ``ppo_mini_batch_size`` and ``ppo_epochs``), so nothing of a rollout outlives
its step and a resumed run is exact: the rollout randomness comes from (seed, step, prompt
index, generation index) alone.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from honing.data.collate import stack_collate
from honing.errors import ConfigError
from honing.losses import combine_rewards, grpo_loss_scale, grpo_loss_sum, normalized_reward_sum, token_logps
from honing.methods.base import BaseTrainModule
from honing.methods.grpo_entropy import high_entropy_mask, token_entropies
from honing.methods.grpo_estimators import group_relative_advantages
from honing.methods.grpo_logps import CompletionLogps
from honing.methods.grpo_loss_stats import LossStats
from honing.methods.grpo_metrics import RolloutMetrics, ended_rows
from honing.methods.grpo_off_policy import off_policy_mask
from honing.methods.grpo_policy_loss import PolicyLoss
from honing.methods.grpo_rollouts import GroupSampler, rollout_seed
from honing.methods.grpo_sampling import mask_truncated
from honing.methods.grpo_settings import RolloutParts, RolloutSettings, grpo_settings, sampling_options
from honing.methods.grpo_validation import RewardValidation
from honing.methods.optimizer_update import unrecorded_optim_step

if TYPE_CHECKING:
    from honing.config.grpo_schema import GRPOSection

__all__ = ["ROLLOUT_KEYS", "GRPOTrainModule", "rollout_seed"]

#: the rollout tensors a loss micro-batch holds, split by rows
ROLLOUT_KEYS = ("input_ids", "attention_mask", "completion_ids", "completion_mask", "advantages")


class GRPOTrainModule(BaseTrainModule):
    """Rollouts, rewards, advantages and the clipped policy-gradient loss (with an optional KL to a reference).

    Its parts: ``sampler`` (the step's groups: ``honing.methods.grpo_rollouts``), ``logps`` (the completions'
    log-probs under the policy and the reference: ``honing.methods.grpo_logps``), ``policy_loss``, ``metrics``."""

    kl_in_loss = True  # the KL term is in the loss (GRPO), not in the reward (RLOO)
    rollout_keys = ROLLOUT_KEYS  # a subclass adds the row-aligned keys its forward reads (grpo_vision: image_row)
    sampler_class: type[GroupSampler] = GroupSampler  # grpo_vision's samples with the prompts' pixels

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        section: Any,
        parts: RolloutParts,
        *,
        chunked_loss: bool = True,
        sampler_options: dict[str, Any] | None = None,
        **options: Any,
    ):
        """``section``: the method's config section, read by ``settings``; ``options``: the step settings every
        train module takes (``honing.methods.base.BaseTrainModule``)."""
        super().__init__(model, optimizer, **options)
        settings = self.settings(section)
        if parts.completions is not None and self.sampler_class is not GroupSampler:
            raise ConfigError(
                f"grpo.completions_per_rank: {type(self).__name__} samples whole groups on each rank; remove it and "
                "give data.global_batch_size (prompts) instead"
            )
        # the loss keys (``loss_options``: delta, the SAPO temperatures, VESPO's k and lambda)
        self.policy_loss = PolicyLoss(
            loss_type=settings.loss_type,
            importance_sampling_level=settings.importance_sampling_level,
            epsilon=settings.epsilon,
            epsilon_high=settings.epsilon_high,
            beta=settings.beta,
            kl_estimator=settings.kl_estimator,
            use_bias_correction_kl=settings.use_bias_correction_kl,
            **settings.loss_options,
        )
        # TRL's: no loss on unfinished completions
        self.mask_truncated_completions = settings.mask_truncated_completions
        self.top_entropy_quantile = settings.top_entropy_quantile  # < 1: only the highest-entropy tokens train
        self.entropy_bonus = settings.entropy_bonus  # TRL's entropy_coef (adaptive or not); None: no bonus
        self.off_policy_mask_threshold = settings.off_policy_mask_threshold  # DeepSeek-V3.2's sequence mask
        if settings.multi_objective_aggregation not in ("sum_then_normalize", "normalize_then_sum"):
            raise ValueError(f"unknown multi_objective_aggregation {settings.multi_objective_aggregation!r}")
        self.multi_objective_aggregation = settings.multi_objective_aggregation
        self.scale_rewards = settings.scale_rewards
        self.num_iterations = settings.num_iterations
        self.steps_per_generation = settings.steps_per_generation  # optimizer steps a rollout batch is cut into
        self.max_completion_length = settings.max_completion_length
        self.seed = parts.seed
        self.validation = parts.validation  # how held-out prompts are answered at an evaluation (None: none)
        self.held_out_scorer = parts.scorer  # what scores them (PPO's: the reward functions alone)
        self._step_tokens: tuple[Any, int] | None = None  # (the batch, its prompt + generated tokens)
        self.sampler = self.sampler_class(
            model,
            tokenizer=parts.tokenizer,
            scorer=parts.scorer,
            stop_token_ids=parts.stop_token_ids,
            num_generations=settings.num_generations,
            max_completion_length=settings.max_completion_length,
            sampling=sampling_options(settings),
            seed=parts.seed,
            device=self.device,
            ranks=self.ranks,
            clock=lambda: self.trainer.global_step if self.trainer is not None else 0,
            rollout_sampler=parts.rollout_sampler,
            tool_turns=parts.tool_turns,
            max_num_gen_batches=settings.max_num_gen_batches,
            refill_prompts=parts.refill_prompts,
            **(sampler_options or {}),
            **({"completions": parts.completions} if parts.completions is not None else {}),
        )
        scoring_temperature = settings.scoring_temperature
        self.logps = CompletionLogps(
            # TRL's OnlineDPOTrainer scores the raw logits: the sampling temperature shapes only what is drawn
            temperature=settings.temperature if scoring_temperature is None else scoring_temperature,
            chunked=chunked_loss,
            autocast=self.autocast,
            # completions per forward / backward: whole groups (micro_batch_size prompts) unless set
            micro_width=settings.micro_batch_completions or self.micro_batch_size * settings.num_generations,
            rollout_keys=self.rollout_keys,
            reference_model=parts.reference_model,
            model_inputs=self.sampler.model_inputs,
            shared_prompts=settings.shared_prompt_forward,
        )
        self.metrics = RolloutMetrics(
            ranks=self.ranks,
            device=self.device,
            scorer=parts.scorer,
            stop_token_ids=self.sampler.stop_token_ids,
            sample_interval=settings.sample_interval,
        )

    @staticmethod
    def settings(section: GRPOSection) -> RolloutSettings:
        """The ``grpo`` section's sampling, loss and estimator settings."""
        return grpo_settings(section)

    # --- the step -----------------------------------------------------------------------
    def train_batch(self, batch: dict[str, Any], dry_run: bool = False) -> None:
        """Generate and score this rank's rollouts, then ``num_iterations`` clipped policy-gradient passes."""
        self.start_step()
        self.learn(self.rollout(batch, dry_run=dry_run), dry_run=dry_run)

    def learn(self, rollouts: dict[str, torch.Tensor], *, dry_run: bool = False) -> None:
        """Back-propagate the GRPO loss of a rollout batch: cut into ``steps_per_generation`` optimizer steps of
        whole groups, the cut passed over ``num_iterations`` times (an optimizer step between two; the loop takes
        the last), recording ``train/loss`` (the last step's) and the KL and clipping metrics."""
        width = self.logps.micro_width  # advantages are computed: a group may span micro-batches
        keys = self.rollout_keys + (("ref_logps",) if "ref_logps" in rollouts else ())
        rows = {k: rollouts[k] for k in keys}
        completions = int(rollouts["completion_mask"].shape[0])
        # whole groups per part, or with groups that span ranks (checked at launch) equal parts of this rank's pairs
        whole = 1 if self.sampler.completions is not None else self.sampler.num_generations
        if completions % (self.steps_per_generation * whole):  # checked at launch
            raise ValueError(f"{completions} completions do not cut into {self.steps_per_generation} parts of groups")
        steps = (
            [rows]
            if self.steps_per_generation == 1
            else stack_collate.split(rows, completions // self.steps_per_generation)
        )
        steps_micro = [stack_collate.split(step, width) for step in steps]
        global_tokens = self.ranks.sum(rollouts["completion_mask"].sum())
        if self.steps_per_generation > 1:  # TRL's dapo normaliser: the generation batch's tokens / its steps
            global_tokens = global_tokens / self.steps_per_generation
        scales = [
            torch.as_tensor(  # backward takes a tensor
                grpo_loss_scale(
                    self.policy_loss.loss_type,
                    sequences=completions // len(steps) * self.ranks.dp_size,
                    tokens=global_tokens,
                    micro_batches=len(micro_batches),
                    max_completion_length=self.max_completion_length,
                    world_size=self.ranks.grad_divisor,
                ),
                dtype=torch.float32,
                device=self.device,
            )
            for micro_batches in steps_micro
        ]
        if self.num_iterations > 1 or self.steps_per_generation > 1:
            # the policy that sampled, for the clipped ratio of every update after the first
            with torch.no_grad():
                for micro in (micro for micro_batches in steps_micro for micro in micro_batches):
                    micro["old_logps"] = self.logps(self.model, micro)
        stats = LossStats()  # the last update's (each update starts its own)
        updates = [(i, k) for i in range(self.num_iterations) for k in range(len(steps))]  # TRL's and verl's order
        for update, (_, k) in enumerate(updates):
            if update:  # the previous update's optimizer step; the loop takes the last one
                unrecorded_optim_step(self)
                self.zero_grads()
                stats = LossStats()
            micro_loss = partial(self.micro_loss, stats=stats)
            if self.entropy_bonus is not None:  # RLOO's micro_loss takes no bonus
                micro_loss = partial(micro_loss, micro_batches=len(steps_micro[k]), scale=scales[k])
            loss_sum = self.backward_each(steps_micro[k], micro_loss, scales[k])
            if self.entropy_bonus is not None and not dry_run:  # the adaptive coefficient moves per optimizer step
                self.entropy_bonus.end_step(self.ranks.sum)
            # every update's loss feeds the non-finite policy; the last one's is the step's train/loss
            last = update == len(updates) - 1
            self.record_loss(loss_sum * scales[k], cross_entropy=False, dry_run=dry_run or not last)
        if self.trainer is not None and not dry_run:
            self.metrics.loss_stats(self.trainer, stats, self.policy_loss, self.kl_in_loss)

    def micro_loss(
        self,
        micro: dict[str, torch.Tensor],
        stats: LossStats,
        micro_batches: int = 1,
        scale: torch.Tensor | float = 1.0,
    ) -> torch.Tensor:
        """One micro-batch's summed policy loss (its clipping and KL added to ``stats``), less the entropy bonus
        (divided by ``scale``, which ``backward_each`` multiplies the sum by, so the bonus keeps TRL's weight)."""
        mask, loss, bonus = micro["completion_mask"], self.policy_loss, self.entropy_bonus
        policy_mask = entropies = None
        if self.top_entropy_quantile < 1.0 or bonus is not None:  # the entropies need the full logits
            logits = self.logps.forward(self.model, micro)().logits[:, :-1]
            logps = token_logps(logits, micro["completion_ids"], self.logps.temperature)
            entropies = token_entropies(logits if bonus is not None else logits.detach(), self.logps.temperature)
        else:
            logps = self.logps(self.model, micro)
        if self.top_entropy_quantile < 1.0:  # TRL's threshold: the (1 - ρ) quantile of every rank's micro-batch
            group = self.parallel_dims.group("dp") if self.parallel_dims is not None else None
            policy_mask = high_entropy_mask(entropies.detach(), mask, 1 - self.top_entropy_quantile, group, self.device)
        old_logps = micro.get("old_logps", logps.detach())
        entropy_mask = policy_mask  # the bonus's tokens: TRL's entropy mask, not the off-policy one
        if self.off_policy_mask_threshold is not None:  # the sampling policy's log-probs: the old ones here
            keep = off_policy_mask(micro["advantages"], logps, old_logps, mask, self.off_policy_mask_threshold)
            policy_mask = keep if policy_mask is None else policy_mask * keep
        per_token, ratio, kl, metric = loss.per_token(
            logps, old_logps, micro["advantages"], mask, micro.get("ref_logps"), policy_mask
        )
        stats.add(mask, ratio.detach(), micro["advantages"], kl, loss.epsilon, loss.upper_epsilon, metric)
        total = grpo_loss_sum(per_token, mask, loss.loss_type)
        if bonus is not None:  # on the tokens the policy trains (TRL's effective mask)
            trained = mask if entropy_mask is None else mask * entropy_mask
            total = total - bonus.term(entropies, trained, micro_batches) / scale
        return total

    def extra_state_dict(self) -> dict[str, Any]:
        """The base's, and the adaptive entropy bonus's coefficient and last entropy (TRL's entropy_ctrl_state)."""
        state = super().extra_state_dict()
        if self.entropy_bonus is not None and self.entropy_bonus.adaptive:
            state["entropy_bonus"] = self.entropy_bonus.state_dict()
        return state

    def load_extra_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what ``extra_state_dict`` returned."""
        super().load_extra_state_dict(state_dict)
        if self.entropy_bonus is not None and "entropy_bonus" in state_dict:
            self.entropy_bonus.load_state_dict(state_dict["entropy_bonus"])

    # --- rollouts -----------------------------------------------------------------------
    def rollout(self, batch: dict[str, Any], *, dry_run: bool = False) -> dict[str, torch.Tensor]:
        """G sampled completions per prompt, their rewards and advantages, and the reference log-probs (with
        dynamic sampling: groups of equal rewards replaced by new prompts' groups, ``honing.methods.grpo_sampling``)."""
        groups, counts = self.sampler.groups(batch, self.trainer.global_step if self.trainer is not None else 0)
        prompt_mask, completion_ids, completion_mask = groups.prompt_mask, groups.completion_ids, groups.completion_mask
        scorer = self.sampler.scorer
        rewards = combine_rewards(groups.rewards_per_func, scorer.weights)
        rollouts = self.sampler.rollout_tensors(groups)
        if self.mask_truncated_completions:  # after the metrics' lengths were read from ``groups``
            mask_truncated(rollouts, ended_rows(completion_ids, groups.attention(), self.sampler.stop_token_ids))
        aggregated = rewards  # GDPO's normalize_then_sum: each reward standardised in its group, then weighted
        if self.multi_objective_aggregation == "normalize_then_sum":
            aggregated = normalized_reward_sum(groups.rewards_per_func, scorer.weights, self.sampler.num_generations)
        advantages, std = self.score_rollouts(aggregated, rollouts, dry_run=dry_run)
        # prompt + generated tokens over every rank: one host read
        self._step_tokens = (batch, int(self.ranks.sum(prompt_mask.sum() + groups.attention().sum())))
        if self.trainer is not None and not dry_run:
            trainer = self.trainer
            attention = groups.attention()
            self.metrics.rollouts(trainer, completion_ids, completion_mask, attention, groups.rewards_per_func, std)
            if groups.tool_counts is not None:
                self.metrics.tool_counts(trainer, groups.tool_counts)
            if counts is not None:
                self.metrics.sampling_counts(trainer, counts)
            self.metrics.samples(trainer, groups.prompts, groups.texts, groups.rewards_per_func, rewards, advantages)
        return rollouts

    def score_rollouts(
        self, rewards: torch.Tensor, rollouts: dict[str, torch.Tensor], *, dry_run: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(advantages, std)`` of the rewards, stored in ``rollouts`` with what the loss needs beside them (the
        reference log-probs of the KL term)."""
        advantages, std = group_relative_advantages(
            rewards,
            self.sampler.num_generations,
            self.scale_rewards,
            self.multi_objective_aggregation,
            self.ranks,
            self.device,
            spans_ranks=self.sampler.completions is not None,
        )
        rollouts["advantages"] = advantages.to(self.device)
        if self.policy_loss.beta != 0.0:
            rollouts["ref_logps"] = self.logps.reference(self.model, rollouts)
        return advantages, std

    # --- what the loop asks ---------------------------------------------------------------
    def num_tokens(self, batch: Any) -> int:
        """Prompt tokens (once per completion) plus generated tokens, over all ranks (TRL's ``num_tokens``)."""
        if self._step_tokens is not None and self._step_tokens[0] is batch:
            return self._step_tokens[1]
        # a skipped step (with groups that span ranks every rank holds the step's prompts: counted once)
        ranks = 1 if self.sampler.completions is not None else self.ranks.dp_size
        return self.collator.num_tokens(batch) * self.sampler.num_generations * ranks

    def eval_batch(self, batch: Any) -> dict[str, torch.Tensor]:
        """Held-out prompts sampled and scored by the rewards (``honing.methods.grpo_validation``): their sums."""
        if self.validation is None:
            raise NotImplementedError("GRPO evaluates held-out prompts only with a RewardValidation")
        return self.validation.eval_batch(self.sampler, batch, self.held_out_scorer)

    def eval_metrics(self, totals: dict[str, float]) -> dict[str, float]:
        """``reward``, ``rewards/<name>/mean``, ... of the held-out completions from the summed totals."""
        return RewardValidation.eval_metrics(self.held_out_scorer.names, totals)
