"""DAPO's dynamic sampling (verl's ``filter_groups``): a group whose rewards are all equal has zero advantage and
teaches nothing, so it is dropped and its place refilled by the groups of new prompts, for up to
``max_num_gen_batches`` generation rounds per step; at the limit the remaining places keep dropped groups (trained
on as plain GRPO would, with zero advantage).

Refill prompts are drawn from the training prompts by (seed, step, round), apart from the loader, and sampled with
seeds that include the round: the epoch's order is untouched and a resumed run draws and samples the same ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from honing.losses import combine_rewards


@dataclass
class GeneratedGroups:
    """One round's sampled groups on this rank: G rows per prompt of every per-completion field."""

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    prompts: list[Any]
    texts: list[str]
    columns: dict[str, list[Any]]
    rewards_per_func: torch.Tensor
    num_generations: int
    completion_attention: torch.Tensor | None = None  # tool turns: every token attended; None: completion_mask
    tool_counts: torch.Tensor | None = None  # tool turns: [rows, 2] calls made and calls failed

    def attention(self) -> torch.Tensor:
        """The completions' attention mask: every real token (the loss mask leaves tool answers out)."""
        return self.completion_mask if self.completion_attention is None else self.completion_attention

    @property
    def num_groups(self) -> int:
        """Prompts (groups) held."""
        return len(self.prompts) // self.num_generations

    def select(self, groups: list[int]) -> GeneratedGroups:
        """Only ``groups`` (their indices), in that order."""
        g = self.num_generations
        rows = [group * g + k for group in groups for k in range(g)]
        index = torch.tensor(rows, dtype=torch.long)

        def take(values: torch.Tensor) -> torch.Tensor:
            return values[index.to(values.device)]

        return replace(
            self,
            prompt_ids=take(self.prompt_ids),
            prompt_mask=take(self.prompt_mask),
            completion_ids=take(self.completion_ids),
            completion_mask=take(self.completion_mask),
            prompts=[self.prompts[r] for r in rows],
            texts=[self.texts[r] for r in rows],
            columns={name: [values[r] for r in rows] for name, values in self.columns.items()},
            rewards_per_func=take(self.rewards_per_func),
            completion_attention=None if self.completion_attention is None else take(self.completion_attention),
            tool_counts=None if self.tool_counts is None else take(self.tool_counts),
        )


def concat_groups(parts: list[GeneratedGroups], pad_token_id: int) -> GeneratedGroups:
    """The groups of several rounds as one batch: prompts left-padded and completions right-padded to the widest."""
    if len(parts) == 1:
        return parts[0]
    prompt_width = max(p.prompt_ids.shape[1] for p in parts)
    completion_width = max(p.completion_ids.shape[1] for p in parts)

    def cat(name: str, width: int, value: int, left: bool) -> torch.Tensor:
        padded = []
        for part in parts:
            tensor = getattr(part, name)
            extra = width - tensor.shape[1]
            padded.append(F.pad(tensor, (extra, 0) if left else (0, extra), value=value))
        return torch.cat(padded)

    names = sorted({name for part in parts for name in part.columns})
    turns = parts[0].tool_counts is not None  # conversations with tool turns (every round's alike)
    return GeneratedGroups(
        prompt_ids=cat("prompt_ids", prompt_width, pad_token_id, left=True),
        prompt_mask=cat("prompt_mask", prompt_width, 0, left=True),
        completion_ids=cat("completion_ids", completion_width, pad_token_id, left=False),
        completion_mask=cat("completion_mask", completion_width, 0, left=False),
        prompts=[p for part in parts for p in part.prompts],
        texts=[t for part in parts for t in part.texts],
        columns={n: [v for part in parts for v in part.columns.get(n, [None] * len(part.prompts))] for n in names},
        rewards_per_func=torch.cat([part.rewards_per_func for part in parts]),
        num_generations=parts[0].num_generations,
        completion_attention=cat("completion_attention", completion_width, 0, left=False) if turns else None,
        tool_counts=torch.cat([part.tool_counts for part in parts]) if turns else None,
    )


def equal_reward_groups(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """Per group, whether its scored rewards are all equal (or fewer than two are scored): its advantages are all
    zero under GRPO's and RLOO's baselines alike. verl's test: a reward spread of exactly 0."""
    grouped = rewards.view(-1, num_generations)
    scored = ~torch.isnan(grouped)
    high = torch.where(scored, grouped, -torch.inf).amax(dim=1)
    low = torch.where(scored, grouped, torch.inf).amin(dim=1)
    return (scored.sum(dim=1) < 2) | (high == low)


@dataclass
class SamplingCounts:
    """What dynamic sampling did in one step on this rank (summed over ranks for the metrics)."""

    rounds: int = 1
    dropped_groups: int = 0
    equal_groups_kept: int = 0
    refill_prompts: int = 0
    kept: list[GeneratedGroups] = field(default_factory=list)


def fill_groups(
    first: GeneratedGroups,
    *,
    weights: torch.Tensor,
    max_rounds: int,
    refill: Callable[[int, int], GeneratedGroups],
    shortage_everywhere: Callable[[int], int],
    pad_token_id: int,
) -> tuple[GeneratedGroups, SamplingCounts]:
    """``first``'s groups with unequal rewards, topped up to its size by ``refill(round, prompts)`` rounds (the
    prompts every rank draws: the largest shortage of any rank, ``shortage_everywhere``, so that every rank takes
    part in every generation) until full or ``max_rounds`` rounds in all; then dropped groups fill what is left."""
    wanted, counts = first.num_groups, SamplingCounts()
    kept: list[GeneratedGroups] = []
    dropped: list[GeneratedGroups] = []
    have = 0

    def sort(groups: GeneratedGroups, room: int) -> None:
        nonlocal have
        equal = equal_reward_groups(combine_rewards(groups.rewards_per_func, weights), groups.num_generations)
        useful = [i for i, flat in enumerate(equal.tolist()) if not flat][:room]
        flat = [i for i, is_flat in enumerate(equal.tolist()) if is_flat]
        counts.dropped_groups += len(flat)
        if useful:
            kept.append(groups.select(useful))
            have += len(useful)
        if flat:
            dropped.append(groups.select(flat))

    sort(first, wanted)
    while counts.rounds < max_rounds:
        prompts = shortage_everywhere(wanted - have)
        if prompts == 0:
            break
        more = refill(counts.rounds, prompts)
        counts.rounds += 1
        counts.refill_prompts += prompts
        sort(more, wanted - have)
    if have < wanted:  # the limit: dropped groups, the earliest first, keep the step's size
        fillers = concat_groups(dropped, pad_token_id)
        counts.equal_groups_kept = wanted - have
        counts.dropped_groups -= counts.equal_groups_kept
        kept.append(fillers.select(list(range(wanted - have))))
    return concat_groups(kept, pad_token_id), counts


class RefillPrompts:
    """Prompts that refill dropped groups: training rows drawn by (seed, step, round), the same draw on every rank,
    each rank its slice; collated as the loader's batches are."""

    def __init__(self, dataset: Any, collate: Callable[[list], Any], *, seed: int, rank: int = 0, world_size: int = 1):
        self.dataset, self.collate = dataset, collate
        self.seed, self.rank, self.world_size = seed, rank, world_size

    def draw(self, step: int, round_index: int, count: int) -> dict[str, Any]:
        """``count`` prompts for this rank."""
        total, rows = count * self.world_size, len(self.dataset)
        rng = np.random.default_rng([self.seed, step, round_index, 0x5EED])
        indices = rng.choice(rows, size=total, replace=total > rows)
        mine = indices[self.rank * count : (self.rank + 1) * count]
        return self.collate([self.dataset[int(i)] for i in mine])


def refill_seed(seed: int, step: int, round_index: int, prompt_index: int, generation: int) -> int:
    """The sampling seed of a refill round's completion (round 0 is ``rollout_seed``'s)."""
    state = np.random.SeedSequence([seed, step, prompt_index, generation, round_index]).generate_state(1, np.uint64)
    return int(state[0] >> 1)


def mask_truncated(rollouts: dict[str, torch.Tensor], ended: torch.Tensor) -> None:
    """TRL's ``mask_truncated_completions``: a completion that ran out of tokens before a stop token (``ended``
    False) gets no loss and no attention over its tokens (its ``completion_mask`` and the completion part of its
    ``attention_mask`` set to 0), so it neither trains nor counts in the token normalisers."""
    keep = ended.to(rollouts["completion_mask"].device).unsqueeze(1)
    rollouts["completion_mask"] = rollouts["completion_mask"] * keep.to(rollouts["completion_mask"].dtype)
    width = rollouts["completion_ids"].shape[1]
    attention = rollouts["attention_mask"].clone()
    attention[:, -width:] = attention[:, -width:] * keep.to(attention.dtype)
    rollouts["attention_mask"] = attention
