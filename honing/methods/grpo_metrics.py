"""GRPO's metrics and samples (TRL's names): the rollouts' lengths, rewards and clipping, dynamic sampling's counts,
tool calls, and the completions written to ``samples.jsonl`` every ``sample_interval`` steps; an object the GRPO
train module owns, handed its trainer and rollouts."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import torch

from honing.distributed import is_rank0
from honing.losses import combine_rewards, nanstd
from honing.methods.grpo_loss_stats import LossStats
from honing.methods.grpo_policy_loss import LOSS_METRICS, PolicyLoss
from honing.methods.grpo_sampling import SamplingCounts
from honing.methods.step_ranks import StepRanks, gather
from honing.rl.rewards import RewardScorer

if TYPE_CHECKING:
    from honing.train.trainer import Trainer


#: ``LossStats`` sums (tokens, kl, low, high, region, clip units, metric, metric units) divided for the metrics
_NUMERATORS = torch.tensor([1, 6, 2, 3, 4])
_DENOMINATORS = torch.tensor([0, 7, 5, 5, 5])


class RolloutMetrics:
    """Records a GRPO step's rollout metrics through the trainer it is handed (every rank the same numbers)."""

    def __init__(
        self,
        *,
        ranks: StepRanks,
        device: torch.device,
        scorer: RewardScorer,
        stop_token_ids: list[int],
        sample_interval: int | None,
    ):
        self.ranks, self.device, self.scorer = ranks, device, scorer
        self.stop_token_ids, self.sample_interval = stop_token_ids, sample_interval

    def rollouts(
        self,
        trainer: Trainer,
        completion_ids: torch.Tensor,
        completion_mask: torch.Tensor,
        attention: torch.Tensor,
        rewards_per_func: torch.Tensor,
        std: torch.Tensor,
    ) -> None:
        """The completions' lengths and clipping, and each reward's mean and spread, over every rank (every value
        computed as one by one, stacked, and read in one host copy)."""
        lengths = completion_mask.sum(1)  # the policy's tokens (tool answers are not counted, as TRL)
        ended = ended_rows(completion_ids, attention, self.stop_token_ids)
        lengths, ended = gather(lengths.float(), self.device), gather(ended.float(), self.device).bool()
        rewards_per_func, std = gather(rewards_per_func, self.device), gather(std.float(), self.device)
        terminated = lengths[ended] if ended.any() else torch.zeros(1)
        values = {
            "completions/mean_length": lengths.mean(),
            **dict(zip(("completions/min_length", "completions/max_length"), torch.aminmax(lengths))),
            "completions/clipped_ratio": (~ended).float().mean(),
            "completions/mean_terminated_length": terminated.mean(),
            **dict(
                zip(
                    ("completions/min_terminated_length", "completions/max_terminated_length"),
                    torch.aminmax(terminated),
                )
            ),
        }
        for index, name in enumerate(self.scorer.names):
            values[f"rewards/{name}/mean"] = torch.nanmean(rewards_per_func[:, index])
            values[f"rewards/{name}/std"] = nanstd(rewards_per_func[:, index])
        rewards = combine_rewards(rewards_per_func, self.scorer.weights)
        values["reward"] = torch.nanmean(rewards)
        values["reward_std"] = nanstd(rewards)
        values["frac_reward_zero_std"] = torch.isclose(std, torch.zeros_like(std)).float().mean()
        for name, number in zip(values, torch.stack(list(values.values())).tolist()):
            record_same(trainer, name, number)

    def tool_counts(self, trainer: Trainer, counts: torch.Tensor) -> None:
        """TRL's tools/call_frequency (calls per completion) and tools/failure_frequency (failed calls per call)."""
        calls, failures = self.ranks.sum(counts.sum(0).to(self.device)).cpu().tolist()
        completions = self.ranks.sum(torch.tensor(counts.shape[0], device=self.device)).item()
        record_same(trainer, "tools/call_frequency", torch.tensor(calls / max(completions, 1)))
        record_same(trainer, "tools/failure_frequency", torch.tensor(failures / calls if calls else 0.0))

    def loss_stats(self, trainer: Trainer, stats: LossStats, loss: PolicyLoss, kl_in_loss: bool) -> None:
        """The KL (where it is in the loss), the loss type's own metric, and the clip ratios of a clipped loss."""
        totals = self.ranks.sum(torch.cat([stats.sums(), stats.metric]).to(self.device)).cpu()
        # kl / tokens, metric / its units, low / high / region / clip units: one float32 division, as one by one
        ratios = (totals[_NUMERATORS] / totals[_DENOMINATORS].clamp(min=1)).tolist()
        recorded: list[tuple[str, float]] = []
        if loss.beta != 0.0 and kl_in_loss:
            recorded.append(("kl", ratios[0]))
        if loss.loss_type in LOSS_METRICS:  # TRL's cispo_clip_ratio, vespo/phi_seq_mean
            recorded.append((LOSS_METRICS[loss.loss_type], ratios[1]))
        if loss.clips:  # TRL records clip ratios for the clipped losses only
            recorded += zip(("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"), ratios[2:])
            # the sequences' (low, high) fractions, every rank's (gathered: rows alternate low, high by rank)
            clipped = gather(torch.cat(stats.clipped_per_sequence, dim=1), self.device)
            extremes = torch.stack([clipped[0::2].min(), clipped[1::2].max()]).tolist()
            recorded += zip(("clip_ratio/low_min", "clip_ratio/high_max"), extremes)
        for name, value in recorded:
            record_same(trainer, name, value)

    def sampling_counts(self, trainer: Trainer, counts: SamplingCounts) -> None:
        """verl's num_gen_batches (the same on every rank), and the groups summed over ranks."""
        record_same(trainer, "num_gen_batches", counts.rounds)
        summed = self.ranks.sum(
            torch.tensor([counts.dropped_groups, counts.equal_groups_kept, counts.refill_prompts], device=self.device)
        ).cpu()
        record_same(trainer, "dynamic_sampling/dropped_groups", summed[0])
        record_same(trainer, "dynamic_sampling/equal_groups_kept", summed[1])
        record_same(trainer, "dynamic_sampling/refill_prompts", summed[2])

    def samples(
        self,
        trainer: Trainer,
        prompts: list[Any],
        texts: list[str],
        rewards_per_func: torch.Tensor,
        rewards: torch.Tensor,
        advantages: torch.Tensor,
    ) -> None:
        """Every ``sample_interval`` steps, the step's completions with their rewards and advantages."""
        step = trainer.global_step
        if not self.sample_interval or step % self.sample_interval or not is_rank0():
            return
        rows = []
        for row, (prompt, text) in enumerate(zip(prompts, texts)):
            sample: dict[str, Any] = {"step": step, "prompt": shown_prompt(prompt), "text": text}
            sample["reward"] = _number(rewards[row])
            sample.update({name: _number(rewards_per_func[row, i]) for i, name in enumerate(self.scorer.names)})
            sample["advantage"] = _number(advantages[row])
            rows.append(sample)
        append_samples(trainer, rows)


def record_same(trainer: Trainer, name: str, value: torch.Tensor | float) -> None:
    """Record ``train/<name>``, a value computed from every rank's values (gathered): each rank records the same."""
    trainer.record_metric(f"train/{name}", value, None)


def shown_prompt(prompt: str | list[dict[str, Any]]) -> str:
    """A prompt as ``samples.jsonl`` shows it: a text, or the messages as JSON."""
    return prompt if isinstance(prompt, str) else json.dumps(prompt)


def append_samples(trainer: Trainer, rows: list[dict[str, Any]]) -> None:
    """Append ``rows`` to the run's ``samples.jsonl`` (kept with the run's files) and show them to the trackers."""
    path = os.path.join(trainer.work_folder, "samples.jsonl")
    os.makedirs(trainer.work_folder, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        for sample in rows:
            handle.write(json.dumps(sample) + "\n")
    trainer.persist_working_file(path)
    trainer.log_samples("completions", [{k: v for k, v in s.items() if k != "step"} for s in rows])


def ended_rows(completion_ids: torch.Tensor, attention: torch.Tensor, stop_token_ids: list[int]) -> torch.Tensor:
    """Per row, whether the completion's last token is a stop token (else it ran out of tokens: clipped)."""
    lengths = attention.sum(1)
    last = completion_ids.gather(1, (lengths - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
    stops = torch.tensor(stop_token_ids, device=completion_ids.device)
    return torch.isin(last, stops) & (lengths > 0)


def _number(value: torch.Tensor) -> float | None:
    number = float(value)
    return None if number != number else number  # NaN: no reward applied
