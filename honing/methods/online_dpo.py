"""Online DPO TrainModule (TRL's OnlineDPOTrainer): each step samples two completions per prompt from the current
policy (GRPO's rollouts: ``honing.methods.grpo``), ranks each pair by the rewards or a pairwise judge, and takes DPO's
loss of the pair against the reference (a frozen copy of the starting policy; LoRA: its adapters off), averaged over
the step's pairs on every rank.

Nothing of a rollout outlives its step, and its randomness comes from (seed, step, prompt index, completion index)
alone, so a resumed run samples the same pairs and ends with the same weights."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from honing.data.collate import stack_collate
from honing.distributed import is_rank0
from honing.errors import DataError
from honing.methods.grpo import GRPOTrainModule
from honing.methods.grpo_metrics import append_samples, ended_rows, record_same, shown_prompt
from honing.methods.grpo_sampling import GeneratedGroups
from honing.methods.grpo_settings import RolloutParts, RolloutSettings
from honing.methods.online_dpo_loss import first_is_chosen, online_dpo_terms, pair_rewards
from honing.methods.step_ranks import StepRanks

if TYPE_CHECKING:
    from honing.config.online_dpo_schema import OnlineDPOSection
    from honing.train.trainer import Trainer

#: the rollout tensors a loss micro-batch holds, split by rows (the two of a pair always in one micro-batch)
PAIR_KEYS = ("input_ids", "attention_mask", "completion_ids", "completion_mask", "ref_logps", "first_chosen")
#: the per-pair sums a step's metrics are made of, in this order
PAIR_SUMS = ("chosen", "rejected", "ref_chosen", "ref_rejected", "accurate")


class NoRewards:
    """The scorer of a run whose judge ranks the pairs and that has no rewards: no reward columns."""

    names: list[str] = []
    weights = torch.zeros(0)

    def score(self, prompts: list[Any], completions: list[Any], columns: dict[str, list[Any]]) -> torch.Tensor:
        """An empty (completions × 0) tensor."""
        return torch.zeros(len(completions), 0)


class OnlineDPOTrainModule(GRPOTrainModule):
    """GRPO's sampling with two completions per prompt, ranked, and DPO's pair loss."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        section: OnlineDPOSection,
        parts: RolloutParts,
        *,
        judge: Callable[[list[Any], list[list[str]]], Any] | None = None,
        **options: Any,
    ):
        """GRPO's parts and ``section`` (the ``online_dpo`` section); ``judge``: the imported pairwise judge (None:
        the rewards rank each pair)."""
        super().__init__(model, optimizer, section, parts, **options)
        self.beta, self.loss_type = section.beta, section.loss_type
        self.missing_eos_penalty = section.missing_eos_penalty
        self.judge = judge

    @staticmethod
    def settings(section: OnlineDPOSection) -> RolloutSettings:  # type: ignore[override]
        """The ``online_dpo`` section's sampling settings: two completions per prompt, scored on the raw logits
        (TRL's OnlineDPOTrainer: the sampling temperature shapes only which are drawn)."""
        return RolloutSettings(
            num_generations=2,
            max_completion_length=section.max_new_tokens,
            temperature=section.temperature,
            top_p=section.top_p,
            top_k=section.top_k,
            min_p=section.min_p,
            repetition_penalty=section.repetition_penalty,
            sample_interval=section.sample_interval,
            scoring_temperature=1.0,
        )

    # --- rollouts -----------------------------------------------------------------------
    def rollout(self, batch: dict[str, Any], *, dry_run: bool = False) -> dict[str, torch.Tensor]:
        """Two completions per prompt, which of each pair is chosen, and the reference's log-probs."""
        groups, _ = self.sampler.groups(batch, self.trainer.global_step if self.trainer is not None else 0)
        rollouts = self.sampler.rollout_tensors(groups)
        scorer = self.sampler.scorer
        ended = ended_rows(groups.completion_ids, groups.attention(), self.sampler.stop_token_ids)
        rewards = pair_rewards(groups.rewards_per_func, scorer.weights, ended.cpu(), self.missing_eos_penalty)
        first = first_is_chosen(rewards) if self.judge is None else self.judged(groups.prompts[0::2], groups.texts)
        rollouts["first_chosen"] = first.repeat_interleave(2).to(self.device)
        rollouts["ref_logps"] = self.logps.reference(self.model, rollouts)
        tokens = int(groups.prompt_mask.sum()) + int(groups.attention().sum())
        self._step_tokens = (batch, int(self.ranks.sum(torch.tensor(tokens, device=self.device))))
        if self.trainer is not None and not dry_run:
            has_scores = bool(scorer.names)  # a judge alone gives no scores
            scores = record_rollout(self.trainer, self.ranks, self.device, groups, ended, rewards, first, has_scores)
            if scores is not None:  # the step's mean reward, for objective/rlhf_reward
                rollouts["scores_mean"] = scores
            append_pair_samples(self.trainer, self.metrics.sample_interval, groups, rewards, first, has_scores)
        return rollouts

    def judged(self, prompts: list[Any], texts: list[str]) -> torch.Tensor:
        """Per pair, whether the judge ranks its first completion better (it answers 0) or its second (1)."""
        pairs = [[texts[i], texts[i + 1]] for i in range(0, len(texts), 2)]
        ranks = list(self.judge(prompts, pairs))
        if len(ranks) != len(pairs) or any(rank not in (0, 1) for rank in ranks):
            raise DataError(
                f"online_dpo.judge returned {ranks!r} for {len(pairs)} pairs; expected one 0 (the first completion "
                "is better) or 1 (the second) per prompt"
            )
        return torch.tensor([rank == 0 for rank in ranks])

    # --- the loss -----------------------------------------------------------------------
    def learn(self, rollouts: dict[str, torch.Tensor], *, dry_run: bool = False) -> None:
        """Back-propagate the mean DPO loss over every rank's pairs, micro-batches of whole pairs."""
        micro_batches = stack_collate.split({k: rollouts[k] for k in PAIR_KEYS}, self.micro_batch_size * 2)
        local_pairs = torch.tensor(float(rollouts["completion_mask"].shape[0] // 2), device=self.device)
        pairs = self.ranks.sum(local_pairs)
        scale = self.ranks.grad_divisor / pairs  # gradients are averaged over ranks: the global mean
        sums: list[torch.Tensor] = []
        loss_sum = self.backward_each(micro_batches, partial(self.pair_loss, sums=sums), scale)
        self.record_loss(loss_sum * scale, cross_entropy=False, dry_run=dry_run)
        if self.trainer is not None and not dry_run:
            totals = self.ranks.sum(torch.stack(sums).sum(0).to(self.device)).cpu() / pairs.cpu()
            record_pair_metrics(self.trainer, totals, self.beta, rollouts.get("scores_mean"))

    def pair_loss(self, micro: dict[str, torch.Tensor], sums: list[torch.Tensor]) -> torch.Tensor:
        """One micro-batch's summed DPO loss of its pairs (their log-prob sums and accuracy added to ``sums``)."""
        logps = self.logps(self.model, micro)
        first = micro["first_chosen"][0::2].bool()
        terms = online_dpo_terms(
            logps, micro["ref_logps"], micro["completion_mask"], first, beta=self.beta, loss_type=self.loss_type
        )
        with torch.no_grad():
            margin = (terms.chosen - terms.ref_chosen) - (terms.rejected - terms.ref_rejected)
            parts = (terms.chosen, terms.rejected, terms.ref_chosen, terms.ref_rejected, (margin > 0).float())
            sums.append(torch.stack([part.float().sum() for part in parts]))
        return terms.losses.sum()


# --- metrics (TRL's names) ----------------------------------------------------------
def record_rollout(
    trainer: Trainer,
    ranks: StepRanks,
    device: torch.device,
    groups: GeneratedGroups,
    ended: torch.Tensor,
    rewards: torch.Tensor,
    first: torch.Tensor,
    has_scores: bool,
) -> torch.Tensor | None:
    """Record the completions' lengths, stops and scores over every rank; return the mean score (None: a judge
    alone, no scores)."""
    lengths = groups.completion_mask.sum(1).float()
    values = [lengths.sum(), (~ended).float().sum(), ended.float().sum(), torch.tensor(float(len(lengths)))]
    if has_scores:
        chosen = torch.where(first, rewards[0::2], rewards[1::2])
        rejected = torch.where(first, rewards[1::2], rewards[0::2])
        values += [rewards.sum(), (chosen - rejected).sum()]
    totals = ranks.sum(torch.stack([v.float().to(device) for v in values])).cpu()
    completions = totals[3].clamp(min=1)
    record_same(trainer, "completions/mean_length", totals[0] / completions)
    record_same(trainer, "completions/clipped_ratio", totals[1] / completions)
    record_same(trainer, "val/contain_eos_token", totals[2] / completions)
    if not has_scores:
        return None
    record_same(trainer, "objective/scores", totals[4] / completions)
    record_same(trainer, "objective/scores_margin", totals[5] / (completions / 2))
    return totals[4] / completions


def record_pair_metrics(trainer: Trainer, totals: torch.Tensor, beta: float, scores: torch.Tensor | None) -> None:
    """TRL's pair metrics from the per-pair means over every rank of ``PAIR_SUMS``."""
    chosen, rejected, ref_chosen, ref_rejected, accurate = totals.tolist()
    kl = ((chosen - ref_chosen) + (rejected - ref_rejected)) / 2  # per completion, summed over its tokens
    record = partial(record_same, trainer)
    record("logps/chosen", torch.tensor(chosen))
    record("logps/rejected", torch.tensor(rejected))
    record("rewards/chosen", torch.tensor(beta * (chosen - ref_chosen)))
    record("rewards/rejected", torch.tensor(beta * (rejected - ref_rejected)))
    record("rewards/margins", torch.tensor(beta * ((chosen - ref_chosen) - (rejected - ref_rejected))))
    record("rewards/accuracies", torch.tensor(accurate))
    record("objective/kl", torch.tensor(kl))
    record("objective/entropy", torch.tensor(-(chosen + rejected) / 2))
    record("objective/non_score_reward", torch.tensor(-beta * kl))
    if scores is not None:
        record("objective/rlhf_reward", scores - beta * kl)
    record("beta", torch.tensor(beta))


def append_pair_samples(
    trainer: Trainer,
    sample_interval: int | None,
    groups: GeneratedGroups,
    rewards: torch.Tensor,
    first: torch.Tensor,
    has_scores: bool,
) -> None:
    """Every ``sample_interval`` steps, the step's completions with their reward and whether each was chosen."""
    step = trainer.global_step
    if not sample_interval or step % sample_interval or not is_rank0():
        return
    chosen_rows = first.repeat_interleave(2).tolist()
    rows = []
    for row, (prompt, text) in enumerate(zip(groups.prompts, groups.texts)):
        sample: dict[str, Any] = {"step": step, "prompt": shown_prompt(prompt), "text": text}
        sample["reward"] = float(rewards[row]) if has_scores else None
        sample["chosen"] = chosen_rows[row] == (row % 2 == 0)  # the first of a pair chosen, or the second
        rows.append(sample)
    append_samples(trainer, rows)
