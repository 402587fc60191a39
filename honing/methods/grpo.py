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

from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np
import torch

from honing import chunked_ce
from honing.data.collate import stack_collate
from honing.distributed import is_distributed
from honing.losses import (
    combine_rewards,
    group_advantages,
    grpo_loss_scale,
    grpo_loss_sum,
    normalized_reward_sum,
    token_logps,
)
from honing.methods.base import BaseTrainModule
from honing.methods.grpo_entropy import high_entropy_mask, token_entropies
from honing.methods.grpo_loss_stats import LossStats
from honing.methods.grpo_metrics import RolloutMetrics, _gather, ended_rows
from honing.methods.grpo_policy_loss import PolicyLoss
from honing.methods.grpo_sampling import GeneratedGroups, RefillPrompts, fill_groups, mask_truncated, refill_seed
from honing.methods.grpo_validation import RewardValidation
from honing.methods.tool_turns import Transcripts
from honing.models.generation import sample_completions
from honing.models.output_head import forward_with_head
from honing.models.parallel import is_fsdp
from honing.models.wrappers import is_lora, unwrap_model
from honing.rl.rewards import RewardScorer

#: the rollout tensors a loss micro-batch holds, split by rows
ROLLOUT_KEYS = ("input_ids", "attention_mask", "completion_ids", "completion_mask", "advantages")


class GRPOTrainModule(RolloutMetrics, BaseTrainModule):
    """Rollouts, rewards, advantages and the clipped policy-gradient loss (with an optional KL to a reference)."""

    kl_in_loss = True  # the KL term is in the loss (GRPO), not in the reward (RLOO)
    rollout_keys = ROLLOUT_KEYS  # a subclass adds the row-aligned keys its forward reads (grpo_vision: image_row)

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        tokenizer: Any,
        scorer: RewardScorer,
        stop_token_ids: Sequence[int],
        num_generations: int = 8,
        max_completion_length: int = 256,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        beta: float = 0.0,
        kl_estimator: str = "k3",
        use_bias_correction_kl: bool = True,
        epsilon: float = 0.2,
        epsilon_high: float | None = None,
        loss_type: str = "dapo",
        scale_rewards: str = "group",
        num_iterations: int = 1,
        steps_per_generation: int = 1,
        reference_model: torch.nn.Module | None = None,
        seed: int = 0,
        sample_interval: int | None = None,
        validation: RewardValidation | None = None,
        importance_sampling_level: str = "token",
        max_num_gen_batches: int | None = None,
        refill_prompts: RefillPrompts | None = None,
        rollout_sampler: Any = None,
        tool_turns: Any = None,
        chunked_loss: bool = True,
        loss_options: dict[str, Any] | None = None,
        mask_truncated_completions: bool = False,
        top_entropy_quantile: float = 1.0,
        multi_objective_aggregation: str = "sum_then_normalize",
        micro_batch_completions: int | None = None,
        **options: Any,
    ):
        super().__init__(model, optimizer, **options)
        self.chunked_loss = chunked_loss
        # the loss keys (``loss_options``: delta, the SAPO temperatures, VESPO's k and lambda)
        self.policy_loss = PolicyLoss(
            loss_type=loss_type,
            importance_sampling_level=importance_sampling_level,
            epsilon=epsilon,
            epsilon_high=epsilon_high,
            beta=beta,
            kl_estimator=kl_estimator,
            use_bias_correction_kl=use_bias_correction_kl,
            **(loss_options or {}),
        )
        self.mask_truncated_completions = mask_truncated_completions  # TRL's: no loss on unfinished completions
        self.top_entropy_quantile = top_entropy_quantile  # < 1: only the highest-entropy tokens train the policy
        if multi_objective_aggregation not in ("sum_then_normalize", "normalize_then_sum"):
            raise ValueError(f"unknown multi_objective_aggregation {multi_objective_aggregation!r}")
        self.multi_objective_aggregation = multi_objective_aggregation
        self.tokenizer = tokenizer
        self.scorer = scorer
        self.stop_token_ids = sorted({int(i) for i in stop_token_ids})
        self.pad_token_id = int(tokenizer.pad_token_id)
        self.num_generations = num_generations
        self.max_completion_length = max_completion_length
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.scale_rewards = scale_rewards
        self.num_iterations = num_iterations
        self.steps_per_generation = steps_per_generation  # optimizer steps a rollout batch is cut into
        # completions per forward / backward: whole groups (micro_batch_size prompts) unless set
        self.micro_width = micro_batch_completions or self.micro_batch_size * num_generations
        self.reference_model = reference_model
        self.seed = seed
        self.sample_interval = sample_interval
        self.validation = validation  # how held-out prompts are answered at an evaluation (None: no validation)
        # dynamic sampling (None: off): generation rounds per step at most, and where refill prompts come from
        if max_num_gen_batches is not None and refill_prompts is None:
            raise ValueError("dynamic sampling (max_num_gen_batches) needs refill_prompts")
        self.max_num_gen_batches = max_num_gen_batches
        self.refill_prompts = refill_prompts
        self._step_tokens: tuple[Any, int] | None = None  # (the batch, its prompt + generated tokens)
        # where completions are sampled: None, this process's decoder; else a rollout server's client
        # (``honing.rollout``), which also brings the server the policy's weights when they have changed
        self.rollout_sampler = rollout_sampler
        # multi-turn tool use (``honing.rl.tool_turns``): None, one assistant turn per completion
        self.tool_turns = tool_turns

    # --- the step -----------------------------------------------------------------------
    def train_batch(self, batch: dict[str, Any], dry_run: bool = False) -> None:
        """Generate and score this rank's rollouts, then ``num_iterations`` clipped policy-gradient passes."""
        self.start_step()
        self.learn(self.rollout(batch, dry_run=dry_run), dry_run=dry_run)

    def learn(self, rollouts: dict[str, torch.Tensor], *, dry_run: bool = False) -> None:
        """Back-propagate the GRPO loss of a rollout batch: cut into ``steps_per_generation`` optimizer steps of
        whole groups, the cut passed over ``num_iterations`` times (an optimizer step between two; the loop takes
        the last), recording ``train/loss`` (the last step's) and the KL and clipping metrics."""
        width = self.micro_width  # advantages are computed: a group may span micro-batches
        rows = {k: rollouts[k] for k in self.rollout_keys + self._logp_keys(rollouts)}
        completions = int(rollouts["completion_mask"].shape[0])
        if completions % (self.steps_per_generation * self.num_generations):  # the recipe checks it at launch
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
                    micro["old_logps"] = self.completion_logps(self.model, micro)
        stats = LossStats()
        updates = [(i, k) for i in range(self.num_iterations) for k in range(len(steps))]  # TRL's and verl's order
        for update, (_, k) in enumerate(updates):
            if update:  # the previous update's optimizer step; the loop takes the last one
                self._inner_optim_step()
                self.zero_grads()
            stats = LossStats()
            loss_sum = self.backward_each(steps_micro[k], partial(self._micro_loss, stats=stats), scales[k])
            # every update's loss feeds the non-finite policy; the last one's is the step's train/loss
            last = update == len(updates) - 1
            self.record_loss(loss_sum * scales[k], cross_entropy=False, dry_run=dry_run or not last)
        if self.trainer is not None and not dry_run:
            self._record_loss_stats(stats)

    def _micro_loss(self, micro: dict[str, torch.Tensor], stats: LossStats) -> torch.Tensor:
        mask, loss = micro["completion_mask"], self.policy_loss
        policy_mask = None
        if self.top_entropy_quantile < 1.0:  # TRL's threshold: the (1 - ρ) quantile of every rank's micro-batch
            logits = self.completion_forward(self.model, micro)().logits[:, :-1]
            logps = token_logps(logits, micro["completion_ids"], self.temperature)
            entropies = token_entropies(logits.detach(), self.temperature)
            group = self.parallel_dims.group("dp") if self.parallel_dims is not None else None
            policy_mask = high_entropy_mask(entropies, mask, 1 - self.top_entropy_quantile, group, self.device)
        else:
            logps = self.completion_logps(self.model, micro)
        old_logps = micro.get("old_logps", logps.detach())
        per_token, ratio, kl, metric = loss.per_token(
            logps, old_logps, micro["advantages"], mask, micro.get("ref_logps"), policy_mask
        )
        stats.add(mask, ratio.detach(), micro["advantages"], kl, loss.epsilon, loss.upper_epsilon, metric)
        return grpo_loss_sum(per_token, mask, loss.loss_type)

    def completion_logps(self, model: torch.nn.Module, micro: dict[str, torch.Tensor]) -> torch.Tensor:
        """Per-token log-probabilities of the completion tokens at the sampling temperature (as TRL scores them:
        ``input_ids`` and ``attention_mask`` only, the logits of the completion positions only). The chunked head
        computes them only where ``completion_mask`` is set (0 elsewhere, where the loss never looks)."""
        completion_ids = micro["completion_ids"]
        run_forward = self.completion_forward(model, micro)
        if self.chunked_loss:
            logps = forward_with_head(
                model,
                lambda hidden, weight, bias: chunked_ce.token_logps(
                    hidden[:, :-1], weight, bias, completion_ids, micro["completion_mask"], self.temperature
                ),
                run_forward,
            )
            if logps is not None:
                return logps
        return token_logps(run_forward().logits[:, :-1], completion_ids, self.temperature)

    def completion_forward(self, model: torch.nn.Module, micro: dict[str, torch.Tensor]) -> Any:
        """The forward over a rollout micro-batch that keeps the logits of the completion positions (and the one
        before them), as a function to call."""

        def run_forward() -> Any:
            with self.autocast():
                return model(
                    input_ids=micro["input_ids"],
                    attention_mask=micro["attention_mask"],
                    use_cache=False,
                    logits_to_keep=micro["completion_ids"].shape[1] + 1,
                    **self.model_inputs(micro),
                )

        return run_forward

    def model_inputs(self, micro: dict[str, torch.Tensor]) -> dict[str, Any]:
        """The forward's inputs besides ids and mask for a rollout micro-batch (none for text)."""
        return {}

    # --- rollouts -----------------------------------------------------------------------
    def rollout(self, batch: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """G sampled completions per prompt, their rewards and advantages, and the reference log-probs (with
        dynamic sampling: groups of equal rewards replaced by new prompts' groups, ``honing.methods.grpo_sampling``)."""
        step = self.trainer.global_step if self.trainer is not None else 0
        seeds = [
            rollout_seed(self.seed, step, int(i), g)
            for i in batch["index"].tolist()
            for g in range(self.num_generations)
        ]
        groups = self.generate(batch, seeds)
        counts = None
        if self.max_num_gen_batches is not None:
            groups, counts = fill_groups(
                groups,
                weights=self.scorer.weights,
                max_rounds=self.max_num_gen_batches,
                refill=partial(self._refill, step),
                shortage_everywhere=self._largest_shortage,
                pad_token_id=self.pad_token_id,
            )
        prompt_mask, completion_ids, completion_mask = groups.prompt_mask, groups.completion_ids, groups.completion_mask
        rewards = combine_rewards(groups.rewards_per_func, self.scorer.weights)
        rollouts = self.rollout_tensors(groups)
        if self.mask_truncated_completions:  # after the metrics' lengths were read from ``groups``
            mask_truncated(rollouts, ended_rows(completion_ids, groups.attention(), self.stop_token_ids))
        aggregated = rewards  # GDPO's normalize_then_sum: each reward standardised in its group, then weighted
        if self.multi_objective_aggregation == "normalize_then_sum":
            aggregated = normalized_reward_sum(groups.rewards_per_func, self.scorer.weights, self.num_generations)
        advantages, std = self.score_rollouts(aggregated, rollouts, dry_run=dry_run)
        prompt_tokens = int(prompt_mask.sum())
        self._step_tokens = (
            batch,
            int(self.ranks.sum(torch.tensor(prompt_tokens + int(groups.attention().sum())))),
        )
        if self.trainer is not None and not dry_run:
            self._record_rollout_metrics(
                completion_ids, completion_mask, groups.attention(), groups.rewards_per_func, std
            )
            if groups.tool_counts is not None:
                self._record_tool_counts(groups.tool_counts)
            if counts is not None:
                self._record_sampling_counts(counts)
            self._log_samples(groups.prompts, groups.texts, groups.rewards_per_func, rewards, advantages)
        return rollouts

    def rollout_tensors(self, groups: GeneratedGroups) -> dict[str, torch.Tensor]:
        """The sampled groups as the loss reads them: prompt + completion ids and mask, and the completions."""
        return {
            "input_ids": torch.cat([groups.prompt_ids, groups.completion_ids], dim=1),
            "attention_mask": torch.cat([groups.prompt_mask, groups.attention()], dim=1),
            "completion_ids": groups.completion_ids,
            "completion_mask": groups.completion_mask,
        }

    def generate(self, batch: dict[str, Any], seeds: list[int]) -> GeneratedGroups:
        """One round: G completions per prompt of ``batch``, sampled with ``seeds`` (one per completion), decoded
        and scored by the rewards."""
        group = self.num_generations
        prompt_ids = batch["input_ids"].to(self.device).repeat_interleave(group, dim=0)
        prompt_mask = batch["attention_mask"].to(self.device).repeat_interleave(group, dim=0)
        prompts = [prompt for prompt in batch["prompt"] for _ in range(group)]
        sampled = self.transcripts(
            batch,
            prompts,
            prompt_ids,
            prompt_mask,
            seeds,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
        )
        completion_ids, completion_mask = sampled.completion_ids, sampled.completion_mask
        columns = {name: [v for v in values for _ in range(group)] for name, values in batch["columns"].items()}
        columns["completion_ids"] = [ids[mask.bool()].tolist() for ids, mask in zip(completion_ids, completion_mask)]
        rewards_per_func = self.scorer.score(prompts, sampled.completions, columns)
        return GeneratedGroups(
            prompt_ids,
            prompt_mask,
            completion_ids,
            completion_mask,
            prompts,
            sampled.texts,
            columns,
            rewards_per_func,
            group,
            completion_attention=sampled.attention,
            tool_counts=sampled.tool_counts,
        )

    def transcripts(
        self,
        batch: dict[str, Any],
        prompts: list[Any],
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        seeds: list[int],
        **sampling: Any,
    ) -> Transcripts:
        """One completion per row of ``prompt_ids`` (``prompts``, each repeated): one sampled assistant turn, or with
        tools a conversation of turns (``honing.methods.tool_turns``), as the loss and the rewards read them."""
        if self.tool_turns is not None:
            return self.tool_turns.sample(self, batch, prompts, prompt_ids, prompt_mask, seeds, **sampling)
        completion_ids, completion_mask = self.sample(batch, prompt_ids, prompt_mask, seeds, **sampling)
        texts = self.tokenizer.batch_decode(
            [ids[mask.bool()].tolist() for ids, mask in zip(completion_ids.cpu(), completion_mask.cpu())],
            skip_special_tokens=True,
        )
        completions: list[Any] = [
            [{"role": "assistant", "content": text}] if isinstance(prompt, list) else text
            for prompt, text in zip(prompts, texts)
        ]
        return Transcripts(completion_ids, completion_mask, None, completions, texts)

    def sample(
        self, batch: dict[str, Any], prompt_ids: Any, prompt_mask: Any, seeds: list[int], **sampling: Any
    ) -> Any:
        """``(completion_ids, completion_mask)``: one completion per row of ``prompt_ids`` (``batch``'s prompts, each
        repeated) seeded by ``seeds``, at the ``temperature`` / ``top_p`` / ``top_k`` of ``sampling``."""
        decoding = dict(max_new_tokens=self.max_completion_length, stop_token_ids=self.stop_token_ids)
        decoding.update(pad_token_id=self.pad_token_id, seeds=seeds, **sampling)
        if self.rollout_sampler is not None:
            step = self.trainer.global_step if self.trainer is not None else 0
            return self.rollout_sampler.sample(self.model, prompt_ids, prompt_mask, step=step, **decoding)
        return sample_completions(self.model, prompt_ids, prompt_mask, sync_ranks=is_fsdp(self.model), **decoding)

    def score_rollouts(
        self, rewards: torch.Tensor, rollouts: dict[str, torch.Tensor], *, dry_run: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(advantages, std)`` of the rewards, stored in ``rollouts`` with what the loss needs beside them (the
        reference log-probs of the KL term)."""
        advantages, std = self.advantages(rewards)
        rollouts["advantages"] = advantages.to(self.device)
        if self.policy_loss.beta != 0.0:
            rollouts["ref_logps"] = self.reference_logps(rollouts)
        return advantages, std

    def _refill(self, step: int, round_index: int, count: int) -> GeneratedGroups:
        batch = self.refill_prompts.draw(step, round_index, count)
        g = self.num_generations
        seeds = [
            refill_seed(self.seed, step, round_index, int(i), k) for i in batch["index"].tolist() for k in range(g)
        ]
        return self.generate(batch, seeds)

    def _largest_shortage(self, shortage: int) -> int:
        # every rank generates in every round (FSDP2 gathers in each forward): the largest shortage of any rank
        if not is_distributed():
            return shortage
        value = torch.tensor([shortage], device=self.device)
        torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.MAX, group=self.parallel_dims.group("dp"))
        return int(value.item())

    def advantages(self, rewards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's advantages (groups never span ranks; ``batch`` scaling uses every rank's rewards, and
        ``normalize_then_sum`` standardises the summed rewards over every rank's completions, as one group)."""
        whole_batch = self.multi_objective_aggregation == "normalize_then_sum"
        if (self.scale_rewards != "batch" and not whole_batch) or not is_distributed():
            if whole_batch:
                return group_advantages(rewards, len(rewards), "group")
            return group_advantages(rewards, self.num_generations, self.scale_rewards)
        everyone = _gather(rewards, self.device, self.parallel_dims.group("dp"))
        if whole_batch:
            advantages, std = group_advantages(everyone, len(everyone), "group")
        else:
            advantages, std = group_advantages(everyone, self.num_generations, "batch")
        start = self.parallel_dims.dp_rank * len(rewards)
        return advantages[start : start + len(rewards)], std[start : start + len(rewards)]

    @torch.no_grad()
    def reference_logps(self, rollouts: dict[str, torch.Tensor]) -> torch.Tensor:
        """The reference model's completion log-probs: the frozen copy, or the model with its adapters off."""
        parts = []
        for micro in self.micro_rollouts(rollouts):
            if self.reference_model is not None:
                parts.append(self.completion_logps(self.reference_model, micro))
            elif is_lora(self.model):
                with unwrap_model(self.model).disable_adapter():
                    parts.append(self.completion_logps(unwrap_model(self.model), micro))
            else:
                raise ValueError("beta != 0 needs a reference model (or a LoRA model, whose adapters are disabled)")
        return torch.cat(parts)

    def micro_rollouts(self, rollouts: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """The rollout tensors there are, cut into micro-batches (``micro_width`` completions each)."""
        return stack_collate.split({k: rollouts[k] for k in self.rollout_keys if k in rollouts}, self.micro_width)

    @staticmethod
    def _logp_keys(rollouts: dict[str, Any]) -> tuple[str, ...]:
        return ("ref_logps",) if "ref_logps" in rollouts else ()

    def _inner_optim_step(self) -> None:
        # an update between two of a rollout batch's; the loop's optim_step records the step's metrics
        if self.trainer is None:
            self.optim_step()
            return
        trainer, self.trainer = self.trainer, _Unrecorded(self.trainer)
        try:
            self.optim_step()
        finally:
            self.trainer = trainer

    # --- what the loop asks ---------------------------------------------------------------
    def num_tokens(self, batch: Any) -> int:
        """Prompt tokens (once per completion) plus generated tokens, over all ranks (TRL's ``num_tokens``)."""
        if self._step_tokens is not None and self._step_tokens[0] is batch:
            return self._step_tokens[1]
        return self.collator.num_tokens(batch) * self.num_generations * self.ranks.dp_size  # a skipped step

    def eval_batch(self, batch: Any) -> dict[str, torch.Tensor]:
        """Held-out prompts sampled and scored by the rewards (``honing.methods.grpo_validation``): their sums."""
        if self.validation is None:
            raise NotImplementedError("GRPO evaluates held-out prompts only with a RewardValidation")
        return self.validation.eval_batch(self, batch)

    def eval_metrics(self, totals: dict[str, float]) -> dict[str, float]:
        """``reward``, ``rewards/<name>/mean``, ... of the held-out completions from the summed totals."""
        return RewardValidation.eval_metrics(self.scorer.names, totals)


def rollout_seed(seed: int, step: int, prompt_index: int, generation: int) -> int:
    """The sampling seed of one completion: a hash of (run seed, step, prompt index, generation index)."""
    return int(np.random.SeedSequence([seed, step, prompt_index, generation]).generate_state(1, np.uint64)[0] >> 1)


class _Unrecorded:
    """The trainer, except that metrics recorded through it are dropped."""

    def __init__(self, trainer: Any):
        self._trainer = trainer

    def record_metric(self, *args: Any, **kwargs: Any) -> None:
        """Drop the metric."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._trainer, name)
