"""GRPO's validation pass: held-out prompts answered by the policy (one greedy completion each by default, as verl's
``val_kwargs``) and scored by the run's rewards, at every evaluation of ``callbacks.evaluator``.

The evaluator adds each batch's sums over batches and ranks exactly; :meth:`RewardValidation.eval_metrics` turns the
totals into ``eval/reward``, ``eval/reward_std``, one ``eval/rewards/<name>/mean`` per reward (the names of the
training metrics, TRL's) and the completions' mean length and clipped ratio.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from honing.config.grpo_validation_schema import GRPOValidationSection
from honing.losses import combine_rewards
from honing.methods.grpo_metrics import ended_rows
from honing.methods.grpo_settings import sampling_options
from honing.methods.tool_turns import Transcripts
from honing.rl.rewards import RewardScorer

if TYPE_CHECKING:
    from honing.methods.grpo_rollouts import GroupSampler

#: marks the validation seeds' stream, apart from the rollouts' (seed, step, prompt, generation)
VALIDATION_STREAM = 0x5EED_0E7A1


@dataclass(frozen=True)
class RewardValidation:
    """How held-out prompts are sampled (``grpo.validation``), and the sums and metrics of their rewards."""

    num_generations: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0
    min_p: float | None = None
    repetition_penalty: float = 1.0

    @classmethod
    def from_section(cls, section: GRPOValidationSection, seed: int) -> RewardValidation:
        """The settings of ``grpo.validation`` with the run's seed."""
        return cls(
            section.num_generations,
            section.temperature,
            section.top_p,
            section.top_k,
            seed,
            min_p=section.min_p,
            repetition_penalty=section.repetition_penalty,
        )

    @torch.no_grad()
    def eval_batch(self, sampler: GroupSampler, batch: dict[str, Any], scorer: RewardScorer) -> dict[str, torch.Tensor]:
        """Sample the completions of one batch of held-out prompts with the GRPO train module's sampler, scored by
        ``scorer``: their sums (a filler batch of a rank that ran out of prompts counts for nothing)."""
        prompts, sampled = self.complete(sampler, batch)
        group = self.num_generations
        ids, mask = sampled.completion_ids, sampled.completion_mask
        columns = {name: [v for v in values for _ in range(group)] for name, values in batch["columns"].items()}
        columns["completion_ids"] = [row[keep.bool()].tolist() for row, keep in zip(ids.cpu(), mask.cpu())]
        rewards_per_func = scorer.score(prompts, sampled.completions, columns)
        real = 0.0 if batch.get("filler") else 1.0
        attention = mask if sampled.attention is None else sampled.attention
        sums = self.sums(scorer, sampler.stop_token_ids, rewards_per_func, ids, mask, attention)
        if sampled.tool_counts is not None:
            sums["tools/calls"], sums["tools/failures"] = sampled.tool_counts.sum(0).double()
        return {key: value * real for key, value in sums.items()}

    def complete(self, sampler: GroupSampler, batch: dict[str, Any]) -> tuple[list[Any], Transcripts]:
        """``num_generations`` completions per prompt: each one's prompt, and the completions as the loss and the
        rewards read them (``honing.methods.tool_turns.Transcripts``: one turn, or a conversation with tools)."""
        group = self.num_generations
        prompt_ids = batch["input_ids"].to(sampler.device).repeat_interleave(group, dim=0)
        prompt_mask = batch["attention_mask"].to(sampler.device).repeat_interleave(group, dim=0)
        seeds = [validation_seed(self.seed, int(i), g) for i in batch["index"].tolist() for g in range(group)]
        prompts = [prompt for prompt in batch["prompt"] for _ in range(group)]
        with torch.random.fork_rng(devices=[]):  # an evaluation must not move the training RNG
            sampled = sampler.transcripts(
                batch,
                prompts,
                prompt_ids,
                prompt_mask,
                seeds,
                **sampling_options(self),
            )
        return prompts, sampled

    @staticmethod
    def sums(
        scorer: RewardScorer,
        stop_token_ids: list[int],
        rewards_per_func: torch.Tensor,
        ids: torch.Tensor,
        mask: torch.Tensor,
        attention: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        """The rewards' sums and counts (a reward's None left out, as the training metrics' nanmean does), and the
        completions' lengths (the policy's tokens) and how many never reached a stop token."""
        rewards = combine_rewards(rewards_per_func, scorer.weights)
        scored = ~torch.isnan(rewards)
        ended = ended_rows(ids, attention, stop_token_ids)
        out = {
            "reward/sum": rewards[scored].sum(),
            "reward/squares": (rewards[scored] ** 2).sum(),
            "reward/count": scored.sum(),
            "completions/count": torch.tensor(len(rewards)),
            "completions/length": mask.sum(),
            "completions/clipped": (~ended).sum(),
        }
        for index, name in enumerate(scorer.names):
            values = rewards_per_func[:, index]
            applied = ~torch.isnan(values)
            out[f"rewards/{name}/sum"] = values[applied].sum()
            out[f"rewards/{name}/count"] = applied.sum()
        return {key: value.detach().double().cpu() for key, value in out.items()}

    @staticmethod
    def eval_metrics(names: list[str], totals: dict[str, float]) -> dict[str, float]:
        """``reward``, ``reward_std``, ``rewards/<name>/mean``, ``completions/mean_length`` and
        ``completions/clipped_ratio`` from the summed totals (NaN where no reward applied)."""
        count = totals.get("reward/count", 0.0)
        mean = totals.get("reward/sum", 0.0) / count if count else math.nan
        variance = (totals.get("reward/squares", 0.0) - count * mean**2) / (count - 1) if count > 1 else math.nan
        completions = totals.get("completions/count", 0.0)
        metrics = {"reward": mean, "reward_std": math.sqrt(max(variance, 0.0)) if count > 1 else math.nan}
        for name in names:
            applied = totals.get(f"rewards/{name}/count", 0.0)
            metrics[f"rewards/{name}/mean"] = totals.get(f"rewards/{name}/sum", 0.0) / applied if applied else math.nan
        if completions:
            metrics["completions/mean_length"] = totals.get("completions/length", 0.0) / completions
            metrics["completions/clipped_ratio"] = totals.get("completions/clipped", 0.0) / completions
        if "tools/calls" in totals and completions:
            calls = totals["tools/calls"]
            metrics["tools/call_frequency"] = calls / completions
            metrics["tools/failure_frequency"] = totals.get("tools/failures", 0.0) / calls if calls else 0.0
        return metrics


def validation_seed(seed: int, prompt_index: int, generation: int) -> int:
    """The sampling seed of one held-out completion: the same at every evaluation, so evaluations differ only by the
    model (greedy completions need none)."""
    state = np.random.SeedSequence([seed, VALIDATION_STREAM, prompt_index, generation]).generate_state(1, np.uint64)
    return int(state[0] >> 1)
