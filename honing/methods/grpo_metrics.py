"""GRPO's metrics and samples (TRL's names): the rollouts' lengths, rewards and clipping, dynamic sampling's counts,
tool calls, and the completions written to ``samples.jsonl`` every ``sample_interval`` steps; a mixin of the GRPO
train module, whose rollouts it reads."""

from __future__ import annotations

import json
import os
from typing import Any

import torch

from honing.distributed import is_distributed, is_rank0
from honing.losses import combine_rewards, nanstd
from honing.methods.grpo_loss_stats import LossStats
from honing.methods.grpo_policy_loss import LOSS_METRICS


class RolloutMetrics:
    """Records a GRPO step's rollout metrics through the train module's trainer (every rank the same numbers)."""

    def _record(self, name: str, value: Any) -> None:
        # computed from every rank's values (gathered): each rank records the same number
        self.trainer.record_metric(f"train/{name}", value, None)

    def _record_rollout_metrics(
        self,
        completion_ids: torch.Tensor,
        completion_mask: torch.Tensor,
        attention: torch.Tensor,
        rewards_per_func: torch.Tensor,
        std: torch.Tensor,
    ) -> None:
        lengths = completion_mask.sum(1)  # the policy's tokens (tool answers are not counted, as TRL)
        ended = ended_rows(completion_ids, attention, self.stop_token_ids)
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

    def _record_tool_counts(self, counts: torch.Tensor) -> None:
        # TRL's tools/call_frequency (calls per completion) and tools/failure_frequency (failed calls per call)
        calls, failures = self.ranks.sum(counts.sum(0).to(self.device)).cpu().tolist()
        completions = self.ranks.sum(torch.tensor(counts.shape[0], device=self.device)).item()
        self._record("tools/call_frequency", torch.tensor(calls / max(completions, 1)))
        self._record("tools/failure_frequency", torch.tensor(failures / calls if calls else 0.0))

    def _record_loss_stats(self, stats: LossStats) -> None:
        totals = self.ranks.sum(torch.stack([*stats.sums(), *stats.metric]).to(self.device)).cpu()
        tokens = totals[0].clamp(min=1)
        if self.policy_loss.beta != 0.0 and self.kl_in_loss:
            self._record("kl", totals[1] / tokens)
        if self.policy_loss.loss_type in LOSS_METRICS:  # TRL's cispo_clip_ratio, vespo/phi_seq_mean
            self._record(LOSS_METRICS[self.policy_loss.loss_type], totals[6] / totals[7].clamp(min=1))
        if not self.policy_loss.clips:  # TRL records clip ratios for the clipped losses only
            return
        units = totals[5].clamp(min=1)  # tokens, or sequences where the ratio is one per sequence
        self._record("clip_ratio/low_mean", totals[2] / units)
        self._record("clip_ratio/high_mean", totals[3] / units)
        self._record("clip_ratio/region_mean", totals[4] / units)
        self._record("clip_ratio/low_min", _gather(torch.cat(stats.low_per_sequence), self.device).min())
        self._record("clip_ratio/high_max", _gather(torch.cat(stats.high_per_sequence), self.device).max())

    def _record_sampling_counts(self, counts: Any) -> None:
        # verl's num_gen_batches (the same on every rank), and the groups summed over ranks
        self._record("num_gen_batches", counts.rounds)
        summed = self.ranks.sum(
            torch.tensor([counts.dropped_groups, counts.equal_groups_kept, counts.refill_prompts], device=self.device)
        ).cpu()
        self._record("dynamic_sampling/dropped_groups", summed[0])
        self._record("dynamic_sampling/equal_groups_kept", summed[1])
        self._record("dynamic_sampling/refill_prompts", summed[2])

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


def ended_rows(completion_ids: torch.Tensor, attention: torch.Tensor, stop_token_ids: list[int]) -> torch.Tensor:
    """Per row, whether the completion's last token is a stop token (else it ran out of tokens: clipped)."""
    lengths = attention.sum(1)
    last = completion_ids.gather(1, (lengths - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
    stops = torch.tensor(stop_token_ids, device=completion_ids.device)
    return torch.isin(last, stops) & (lengths > 0)


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
