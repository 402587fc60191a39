"""A step's sampled groups: G completions per prompt from the policy (this process's decoder, or a rollout server's
client), one assistant turn or a conversation with tools (``honing.methods.tool_turns``), scored by the rewards; with
dynamic sampling (``max_num_gen_batches``), groups of equal rewards replaced by refill prompts' groups
(``honing.methods.grpo_sampling``). The randomness of a completion comes from (seed, step, prompt index, generation
index) alone, so a resumed run samples the same groups."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol

import numpy as np
import torch

from honing.distributed import is_distributed
from honing.methods.grpo_sampling import GeneratedGroups, RefillPrompts, SamplingCounts, fill_groups, refill_seed
from honing.methods.step_ranks import StepRanks
from honing.methods.tool_turns import ToolTurns, Transcripts
from honing.models.generation import sample_completions
from honing.models.parallel import is_fsdp
from honing.rl.rewards import RewardScorer

#: a batch of prompts as the loader gives it (ids, mask, index, prompt, columns; a vision prompt's image inputs)
Batch = dict[str, Any]


class RolloutServer(Protocol):
    """A rollout server's client (``honing.rollout``): samples with the policy's weights, sent when they changed."""

    def sample(
        self, model: torch.nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, *, step: int, **decoding: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(completion_ids, completion_mask)``, one completion per row."""


def rollout_seed(seed: int, step: int, prompt_index: int, generation: int) -> int:
    """The sampling seed of one completion: a hash of (run seed, step, prompt index, generation index)."""
    return int(np.random.SeedSequence([seed, step, prompt_index, generation]).generate_state(1, np.uint64)[0] >> 1)


def token_lists(ids: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
    """Each row's tokens where ``mask`` is set, as Python ints: two host copies for the batch, not three operators
    a row."""
    return [[t for t, keep in zip(row, kept) if keep] for row, kept in zip(ids.tolist(), mask.tolist())]


class GroupSampler:
    """Samples, decodes and scores a step's groups with ``model``; ``clock()`` is the trainer's step (a rollout
    server sends the weights once per step)."""

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        tokenizer: Any,
        scorer: RewardScorer,
        stop_token_ids: Sequence[int],
        num_generations: int,
        max_completion_length: int,
        sampling: dict[str, float],
        seed: int,
        device: torch.device,
        ranks: StepRanks,
        clock: Callable[[], int],
        rollout_sampler: RolloutServer | None = None,
        tool_turns: ToolTurns | None = None,
        max_num_gen_batches: int | None = None,
        refill_prompts: RefillPrompts | None = None,
        completions: slice | None = None,
    ):
        if max_num_gen_batches is not None and refill_prompts is None:
            raise ValueError("dynamic sampling (max_num_gen_batches) needs refill_prompts")
        self.model, self.tokenizer, self.scorer = model, tokenizer, scorer
        self.stop_token_ids = sorted({int(i) for i in stop_token_ids})
        self.pad_token_id = int(tokenizer.pad_token_id)
        self.num_generations, self.max_completion_length = num_generations, max_completion_length
        self.sampling = sampling  # temperature, top_p, top_k
        self.seed, self.device, self.ranks, self.clock = seed, device, ranks, clock
        # None: this process's decoder; else a rollout server's client, which also brings the server the weights
        self.rollout_sampler = rollout_sampler
        self.tool_turns = tool_turns  # None: one assistant turn per completion
        # dynamic sampling (None: off): generation rounds per step at most, and where refill prompts come from
        self.max_num_gen_batches, self.refill_prompts = max_num_gen_batches, refill_prompts
        #: this rank's slice of the step's (prompt, completion) pairs when groups span ranks; None: whole groups
        self.completions = completions
        #: fills more reward columns of each round's groups after the rewards (PPO's reward model); None: none
        self.rescore: Callable[[GeneratedGroups], None] | None = None
        self._decoded: tuple[torch.Tensor, list[list[int]]] | None = None  # the last completions' token lists

    def groups(self, batch: Batch, step: int) -> tuple[GeneratedGroups, SamplingCounts | None]:
        """This step's groups of ``batch``'s prompts, and what dynamic sampling did (None: off)."""
        g = self.num_generations
        seeds = [rollout_seed(self.seed, step, int(i), k) for i in batch["index"].tolist() for k in range(g)]
        if self.completions is not None:  # every rank holds the step's prompts and samples its pairs of them
            return self.generate(batch, seeds[self.completions], self.completions), None
        groups = self.generate(batch, seeds)
        if self.max_num_gen_batches is None:
            return groups, None
        return fill_groups(
            groups,
            weights=self.scorer.weights,
            max_rounds=self.max_num_gen_batches,
            refill=partial(self._refill, step),
            shortage_everywhere=self._largest_shortage,
            pad_token_id=self.pad_token_id,
        )

    def generate(self, batch: Batch, seeds: list[int], pairs: slice | None = None) -> GeneratedGroups:
        """One round: G completions per prompt of ``batch``, sampled with ``seeds`` (one per completion), decoded
        and scored by the rewards; ``pairs``: only those of the flattened (prompt, completion) pairs (a group that
        spans ranks), None: all."""
        group, rows = self.num_generations, slice(None) if pairs is None else pairs
        prompt_ids = batch["input_ids"].to(self.device).repeat_interleave(group, dim=0)[rows]
        prompt_mask = batch["attention_mask"].to(self.device).repeat_interleave(group, dim=0)[rows]
        prompts = [prompt for prompt in batch["prompt"] for _ in range(group)][rows]
        sampled = self.transcripts(batch, prompts, prompt_ids, prompt_mask, seeds, **self.sampling)
        completion_ids, completion_mask = sampled.completion_ids, sampled.completion_mask
        columns = {name: [v for v in values for _ in range(group)][rows] for name, values in batch["columns"].items()}
        decoded = self._decoded  # the lists ``transcripts`` decoded the texts from, when these are its completions
        same = decoded is not None and decoded[0] is completion_ids
        columns["completion_ids"] = decoded[1] if same else token_lists(completion_ids, completion_mask)
        self._decoded = None
        rewards_per_func = self.scorer.score(prompts, sampled.completions, columns)
        groups = GeneratedGroups(
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
        if self.rescore is not None:
            self.rescore(groups)
        return groups

    def transcripts(
        self,
        batch: Batch,
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
        tokens = token_lists(completion_ids, completion_mask)
        self._decoded = (completion_ids, tokens)  # the rewards' completion_ids column: read once
        texts = self.tokenizer.batch_decode(tokens, skip_special_tokens=True)
        completions: list[Any] = [
            [{"role": "assistant", "content": text}] if isinstance(prompt, list) else text
            for prompt, text in zip(prompts, texts)
        ]
        return Transcripts(completion_ids, completion_mask, None, completions, texts)

    def sample(
        self, batch: Batch, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, seeds: list[int], **sampling: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(completion_ids, completion_mask)``: one completion per row of ``prompt_ids`` (``batch``'s prompts, each
        repeated) seeded by ``seeds``, at the ``temperature`` / ``top_p`` / ``top_k`` of ``sampling``."""
        decoding = dict(max_new_tokens=self.max_completion_length, stop_token_ids=self.stop_token_ids)
        decoding.update(pad_token_id=self.pad_token_id, seeds=seeds, **sampling)
        if self.rollout_sampler is not None:
            return self.rollout_sampler.sample(self.model, prompt_ids, prompt_mask, step=self.clock(), **decoding)
        return sample_completions(self.model, prompt_ids, prompt_mask, sync_ranks=is_fsdp(self.model), **decoding)

    def rollout_tensors(self, groups: GeneratedGroups) -> dict[str, torch.Tensor]:
        """The sampled groups as the loss reads them: prompt + completion ids and mask, and the completions."""
        return {
            "input_ids": torch.cat([groups.prompt_ids, groups.completion_ids], dim=1),
            "attention_mask": torch.cat([groups.prompt_mask, groups.attention()], dim=1),
            "completion_ids": groups.completion_ids,
            "completion_mask": groups.completion_mask,
        }

    def model_inputs(self, micro: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The scoring forward's inputs besides ids and mask for a micro-batch of the rollouts (none for text)."""
        return {}

    def _refill(self, step: int, round_index: int, count: int) -> GeneratedGroups:
        assert self.refill_prompts is not None, "checked in __init__"
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
        torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.MAX, group=self.ranks.dims.group("dp"))
        return int(value.item())
