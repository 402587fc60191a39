"""GRPO TrainModule: each step samples G completions per prompt, scores them, and takes the group-relative
policy-gradient step (TRL's GRPOTrainer maths, ``honing.losses``), inside the same loop as every method.

A step is one rollout batch: the loader's prompts are generated from (rows of each rank's batch, G completions
each), scored by the rewards, turned into advantages, and trained on ``num_iterations`` times (the first
``num_iterations - 1`` optimizer steps inside ``train_batch``, the last one the loop's ``optim_step``), so nothing
of a rollout outlives its step and a resumed run is exact: the rollout randomness comes from (seed, step, prompt
index, generation index) alone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np
import torch

from honing import chunked_ce
from honing.data.collate import stack_collate
from honing.distributed import is_distributed, is_rank0
from honing.losses import (
    GRPO_LOSS_TYPES,
    combine_rewards,
    group_advantages,
    grpo_loss_scale,
    grpo_loss_sum,
    grpo_per_token_loss,
    nanstd,
    token_logps,
)
from honing.methods.base import BaseTrainModule
from honing.models.generation import sample_completions
from honing.models.output_head import forward_with_head
from honing.models.parallel import is_fsdp
from honing.models.wrappers import is_lora, unwrap_model
from honing.rl.rewards import RewardScorer

#: the rollout tensors a loss micro-batch holds, split by rows
ROLLOUT_KEYS = ("input_ids", "attention_mask", "completion_ids", "completion_mask", "advantages")


class GRPOTrainModule(BaseTrainModule):
    """Rollouts, rewards, advantages and the clipped policy-gradient loss (with an optional KL to a reference)."""

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
        epsilon: float = 0.2,
        epsilon_high: float | None = None,
        loss_type: str = "dapo",
        scale_rewards: str = "group",
        num_iterations: int = 1,
        reference_model: torch.nn.Module | None = None,
        seed: int = 0,
        sample_interval: int | None = None,
        chunked_loss: bool = True,
        **options: Any,
    ):
        super().__init__(model, optimizer, **options)
        self.chunked_loss = chunked_loss
        if loss_type not in GRPO_LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {GRPO_LOSS_TYPES}, got {loss_type!r}")
        self.tokenizer = tokenizer
        self.scorer = scorer
        self.stop_token_ids = sorted({int(i) for i in stop_token_ids})
        self.pad_token_id = int(tokenizer.pad_token_id)
        self.num_generations = num_generations
        self.max_completion_length = max_completion_length
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.beta = beta
        self.epsilon = epsilon
        self.epsilon_high = epsilon if epsilon_high is None else epsilon_high
        self.loss_type = loss_type
        self.scale_rewards = scale_rewards
        self.num_iterations = num_iterations
        self.reference_model = reference_model
        self.seed = seed
        self.sample_interval = sample_interval
        self._step_tokens: tuple[Any, int] | None = None  # (the batch, its prompt + generated tokens)

    # --- the step -----------------------------------------------------------------------
    def train_batch(self, batch: dict[str, Any], dry_run: bool = False) -> None:
        """Generate and score this rank's rollouts, then ``num_iterations`` clipped policy-gradient passes."""
        self.start_step()
        self.learn(self.rollout(batch, dry_run=dry_run), dry_run=dry_run)

    def learn(self, rollouts: dict[str, torch.Tensor], *, dry_run: bool = False) -> None:
        """Back-propagate the GRPO loss of a rollout batch (``num_iterations`` passes, an optimizer step between
        two), recording ``train/loss`` and the KL and clipping metrics."""
        width = self.micro_batch_size * self.num_generations  # micro-batches hold whole groups
        micro_batches = stack_collate.split({k: rollouts[k] for k in ROLLOUT_KEYS + self._logp_keys(rollouts)}, width)
        completions = int(rollouts["completion_mask"].shape[0])
        global_tokens = self.sum_over_ranks(rollouts["completion_mask"].sum())
        scale = grpo_loss_scale(
            self.loss_type,
            sequences=completions * self.data_parallel_size,
            tokens=global_tokens,
            micro_batches=len(micro_batches),
            max_completion_length=self.max_completion_length,
            world_size=self.grad_divisor,
        )
        scale = torch.as_tensor(scale, dtype=torch.float32, device=self.device)  # backward takes a tensor
        if self.num_iterations > 1:  # the policy that sampled, for the clipped ratio of every later pass
            with torch.no_grad():
                for micro in micro_batches:
                    micro["old_logps"] = self.completion_logps(self.model, micro)
        stats = _LossStats()
        for iteration in range(self.num_iterations):
            if iteration:  # the previous pass's update; the loop takes the last one
                self._inner_optim_step()
                self.zero_grads()
            stats = _LossStats()
            loss_sum = self.backward_each(micro_batches, partial(self._micro_loss, stats=stats), scale)
            # every pass's loss feeds the non-finite policy; the last pass's is the step's train/loss
            last = iteration == self.num_iterations - 1
            self.record_loss(loss_sum * scale, cross_entropy=False, dry_run=dry_run or not last)
        if self.trainer is not None and not dry_run:
            self._record_loss_stats(stats)

    def _micro_loss(self, micro: dict[str, torch.Tensor], stats: _LossStats) -> torch.Tensor:
        logps = self.completion_logps(self.model, micro)
        old_logps = micro.get("old_logps", logps.detach())
        per_token, ratio, kl = grpo_per_token_loss(
            logps,
            old_logps,
            micro["advantages"],
            epsilon=self.epsilon,
            epsilon_high=self.epsilon_high,
            ref_logps=micro.get("ref_logps"),
            beta=self.beta,
        )
        stats.add(micro["completion_mask"], ratio.detach(), micro["advantages"], kl, self.epsilon, self.epsilon_high)
        return grpo_loss_sum(per_token, micro["completion_mask"], self.loss_type)

    def completion_logps(self, model: torch.nn.Module, micro: dict[str, torch.Tensor]) -> torch.Tensor:
        """Per-token log-probabilities of the completion tokens at the sampling temperature (as TRL scores them:
        ``input_ids`` and ``attention_mask`` only, the logits of the completion positions only). The chunked head
        computes them only where ``completion_mask`` is set (0 elsewhere, where the loss never looks)."""
        completion_ids = micro["completion_ids"]
        width = completion_ids.shape[1]

        def run_forward() -> Any:
            with self.autocast():
                return model(
                    input_ids=micro["input_ids"],
                    attention_mask=micro["attention_mask"],
                    use_cache=False,
                    logits_to_keep=width + 1,
                )

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

    # --- rollouts -----------------------------------------------------------------------
    def rollout(self, batch: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """G sampled completions per prompt, their rewards and advantages, and the reference log-probs."""
        group = self.num_generations
        prompt_ids = batch["input_ids"].to(self.device).repeat_interleave(group, dim=0)
        prompt_mask = batch["attention_mask"].to(self.device).repeat_interleave(group, dim=0)
        step = self.trainer.global_step if self.trainer is not None else 0
        seeds = [rollout_seed(self.seed, step, int(i), g) for i in batch["index"].tolist() for g in range(group)]
        completion_ids, completion_mask = sample_completions(
            self.model,
            prompt_ids,
            prompt_mask,
            max_new_tokens=self.max_completion_length,
            stop_token_ids=self.stop_token_ids,
            pad_token_id=self.pad_token_id,
            seeds=seeds,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            sync_ranks=is_fsdp(self.model),
        )
        prompts = [prompt for prompt in batch["prompt"] for _ in range(group)]
        texts = self.tokenizer.batch_decode(
            [ids[mask.bool()].tolist() for ids, mask in zip(completion_ids.cpu(), completion_mask.cpu())],
            skip_special_tokens=True,
        )
        completions: list[Any] = [
            [{"role": "assistant", "content": text}] if isinstance(prompt, list) else text
            for prompt, text in zip(prompts, texts)
        ]
        columns = {name: [v for v in values for _ in range(group)] for name, values in batch["columns"].items()}
        columns["completion_ids"] = [ids[mask.bool()].tolist() for ids, mask in zip(completion_ids, completion_mask)]
        rewards_per_func = self.scorer.score(prompts, completions, columns)
        rewards = combine_rewards(rewards_per_func, self.scorer.weights)
        advantages, std = self.advantages(rewards)
        rollouts = {
            "input_ids": torch.cat([prompt_ids, completion_ids], dim=1),
            "attention_mask": torch.cat([prompt_mask, completion_mask], dim=1),
            "completion_ids": completion_ids,
            "completion_mask": completion_mask,
            "advantages": advantages.to(self.device),
        }
        if self.beta != 0.0:
            rollouts["ref_logps"] = self.reference_logps(rollouts)
        prompt_tokens = int(prompt_mask.sum())
        self._step_tokens = (batch, int(self.sum_over_ranks(torch.tensor(prompt_tokens + int(completion_mask.sum())))))
        if self.trainer is not None and not dry_run:
            self._record_rollout_metrics(completion_ids, completion_mask, rewards_per_func, std)
            self._log_samples(prompts, texts, rewards_per_func, rewards, advantages)
        return rollouts

    def advantages(self, rewards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's advantages (groups never span ranks; ``batch`` scaling uses every rank's rewards)."""
        if self.scale_rewards != "batch" or not is_distributed():
            return group_advantages(rewards, self.num_generations, self.scale_rewards)
        everyone = _gather(rewards, self.device, self.parallel_dims.group("dp"))
        advantages, std = group_advantages(everyone, self.num_generations, "batch")
        start = self.parallel_dims.dp_rank * len(rewards)
        return advantages[start : start + len(rewards)], std[start : start + len(rewards)]

    @torch.no_grad()
    def reference_logps(self, rollouts: dict[str, torch.Tensor]) -> torch.Tensor:
        """The reference model's completion log-probs: the frozen copy, or the model with its adapters off."""
        width = self.micro_batch_size * self.num_generations
        parts = []
        for micro in stack_collate.split({k: rollouts[k] for k in ROLLOUT_KEYS}, width):
            if self.reference_model is not None:
                parts.append(self.completion_logps(self.reference_model, micro))
            elif is_lora(self.model):
                with unwrap_model(self.model).disable_adapter():
                    parts.append(self.completion_logps(unwrap_model(self.model), micro))
            else:
                raise ValueError("beta != 0 needs a reference model (or a LoRA model, whose adapters are disabled)")
        return torch.cat(parts)

    @staticmethod
    def _logp_keys(rollouts: dict[str, Any]) -> tuple[str, ...]:
        return ("ref_logps",) if "ref_logps" in rollouts else ()

    def _inner_optim_step(self) -> None:
        # an update between two passes over one rollout batch; the loop's optim_step records the step's metrics
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
        return self.collator.num_tokens(batch) * self.num_generations * self.data_parallel_size  # a skipped step

    def eval_batch(self, batch: Any) -> dict[str, torch.Tensor]:
        """GRPO has no validation loss (its reward is logged every step)."""
        raise NotImplementedError("GRPO has no evaluation batches")

    # --- metrics and samples --------------------------------------------------------------
    def _record(self, name: str, value: Any) -> None:
        # computed from every rank's values (gathered): each rank records the same number
        self.trainer.record_metric(f"train/{name}", value, None)

    def _record_rollout_metrics(
        self,
        completion_ids: torch.Tensor,
        completion_mask: torch.Tensor,
        rewards_per_func: torch.Tensor,
        std: torch.Tensor,
    ) -> None:
        lengths = completion_mask.sum(1)
        ended = (
            torch.isin(completion_ids, torch.tensor(self.stop_token_ids, device=completion_ids.device))
            & completion_mask.bool()
        ).any(1)
        lengths, ended = _gather(lengths.float(), self.device), _gather(ended.float(), self.device).bool()
        rewards_per_func, std = _gather(rewards_per_func, self.device), _gather(std.float(), self.device)
        self._record("completions/mean_length", lengths.mean())
        self._record("completions/min_length", lengths.min())
        self._record("completions/max_length", lengths.max())
        self._record("completions/clipped_ratio", (~ended).float().mean())
        terminated = lengths[ended] if ended.any() else torch.zeros(1)
        self._record("completions/mean_terminated_length", terminated.mean())
        self._record("completions/min_terminated_length", terminated.min())
        self._record("completions/max_terminated_length", terminated.max())
        for index, name in enumerate(self.scorer.names):
            self._record(f"rewards/{name}/mean", torch.nanmean(rewards_per_func[:, index]))
            self._record(f"rewards/{name}/std", nanstd(rewards_per_func[:, index]))
        rewards = combine_rewards(rewards_per_func, self.scorer.weights)
        self._record("reward", torch.nanmean(rewards))
        self._record("reward_std", nanstd(rewards))
        self._record("frac_reward_zero_std", torch.isclose(std, torch.zeros_like(std)).float().mean())

    def _record_loss_stats(self, stats: _LossStats) -> None:
        totals = self.sum_over_ranks(torch.stack(stats.sums()).to(self.device)).cpu()
        tokens = totals[0].clamp(min=1)
        if self.beta != 0.0:
            self._record("kl", totals[1] / tokens)
        self._record("clip_ratio/low_mean", totals[2] / tokens)
        self._record("clip_ratio/high_mean", totals[3] / tokens)
        self._record("clip_ratio/region_mean", totals[4] / tokens)
        self._record("clip_ratio/low_min", _gather(torch.cat(stats.low_per_sequence), self.device).min())
        self._record("clip_ratio/high_max", _gather(torch.cat(stats.high_per_sequence), self.device).max())

    def _log_samples(
        self,
        prompts: list[Any],
        texts: list[str],
        rewards_per_func: torch.Tensor,
        rewards: torch.Tensor,
        advantages: torch.Tensor,
    ) -> None:
        step = self.trainer.global_step
        if not self.sample_interval or step % self.sample_interval or not is_rank0():
            return
        rows = []
        for row, (prompt, text) in enumerate(zip(prompts, texts)):
            shown = prompt if isinstance(prompt, str) else json.dumps(prompt)
            sample: dict[str, Any] = {"step": step, "prompt": shown, "text": text, "reward": _number(rewards[row])}
            sample.update({name: _number(rewards_per_func[row, i]) for i, name in enumerate(self.scorer.names)})
            sample["advantage"] = _number(advantages[row])
            rows.append(sample)
        path = os.path.join(self.trainer.work_folder, "samples.jsonl")
        os.makedirs(self.trainer.work_folder, exist_ok=True)
        with open(path, "a", encoding="utf-8") as handle:
            for sample in rows:
                handle.write(json.dumps(sample) + "\n")
        self.trainer.persist_working_file(path)
        self.trainer.log_samples("completions", [{k: v for k, v in s.items() if k != "step"} for s in rows])


def rollout_seed(seed: int, step: int, prompt_index: int, generation: int) -> int:
    """The sampling seed of one completion: a hash of (run seed, step, prompt index, generation index)."""
    return int(np.random.SeedSequence([seed, step, prompt_index, generation]).generate_state(1, np.uint64)[0] >> 1)


class _LossStats:
    """Token counts, KL and clipping of the step's last pass, summed over its micro-batches."""

    def __init__(self) -> None:
        self.totals = [torch.zeros(()) for _ in range(5)]  # tokens, kl, low, high, region
        self.low_per_sequence: list[torch.Tensor] = []
        self.high_per_sequence: list[torch.Tensor] = []

    def add(
        self,
        mask: torch.Tensor,
        ratio: torch.Tensor,
        advantages: torch.Tensor,
        kl: torch.Tensor | None,
        epsilon: float,
        epsilon_high: float,
    ) -> None:
        """Add one micro-batch (TRL's clip-ratio definitions: low when ratio < 1−ε with A < 0, high when
        ratio > 1+ε_high with A > 0)."""
        mask = mask.float()
        advantages = advantages.unsqueeze(1)
        low = ((ratio < 1 - epsilon) & (advantages < 0)).float()
        high = ((ratio > 1 + epsilon_high) & (advantages > 0)).float()
        region = ((low + high) > 0).float()
        values = [mask.sum(), (kl.detach() * mask).sum() if kl is not None else torch.zeros(())]
        values += [(low * mask).sum(), (high * mask).sum(), (region * mask).sum()]
        self.totals = [total + value.detach().float().cpu() for total, value in zip(self.totals, values)]
        tokens = mask.sum(-1)
        self.low_per_sequence.append(((low * mask).sum(-1) / tokens).detach())
        self.high_per_sequence.append(((high * mask).sum(-1) / tokens).detach())

    def sums(self) -> list[torch.Tensor]:
        """The five sums (tokens, kl, low, high, region)."""
        return self.totals


class _Unrecorded:
    """The trainer, except that metrics recorded through it are dropped."""

    def __init__(self, trainer: Any):
        self._trainer = trainer

    def record_metric(self, *args: Any, **kwargs: Any) -> None:
        """Drop the metric."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._trainer, name)


def _gather(values: torch.Tensor, device: torch.device, group: Any = None) -> torch.Tensor:
    """Every rank's ``values`` (of the same shape) of ``group`` (None: every rank) concatenated in rank order, on
    the CPU; itself in one process. The collective runs on ``device`` (NCCL reduces only GPU tensors)."""
    if not is_distributed():
        return values.cpu()
    values = values.to(device).contiguous()
    parts = [torch.empty_like(values) for _ in range(torch.distributed.get_world_size(group))]
    torch.distributed.all_gather(parts, values, group=group)
    return torch.cat(parts).cpu()


def _number(value: torch.Tensor) -> float | None:
    number = float(value)
    return None if number != number else number  # NaN: no reward applied
