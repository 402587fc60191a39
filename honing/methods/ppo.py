"""PPO TrainModule (TRL's PPOTrainer): GRPO's rollouts with one completion per prompt, scored by a reward model
and / or reward functions; per-token rewards with the KL penalty, a value model's GAE advantages and returns
(``honing.methods.ppo_loss``), then ``num_ppo_epochs`` passes over the rollout batch, each shuffled and cut into
``num_mini_batches`` optimizer steps of the clipped policy loss plus ``vf_coef`` × the clipped value loss."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from honing.data.collate import stack_collate
from honing.methods.grpo import GRPOTrainModule
from honing.methods.grpo_logps import CompletionLogps
from honing.methods.grpo_rollouts import GroupSampler
from honing.methods.grpo_sampling import GeneratedGroups
from honing.methods.grpo_settings import RolloutParts, RolloutSettings
from honing.methods.optimizer_update import unrecorded_optim_step
from honing.methods.ppo_loss import ppo_advantages, ppo_policy_loss, ppo_rewards, ppo_value_loss, response_masks
from honing.methods.ppo_value import ValueModel, sequence_scores, token_values
from honing.rl.rewards import RewardScorer
from honing.train.metrics import ReduceType

if TYPE_CHECKING:
    from honing.config.ppo_schema import PPOSection

#: the rollout tensors a PPO update reads, row-aligned
PPO_KEYS = ("input_ids", "attention_mask", "completion_ids", "completion_mask", "advantages", "returns", "values")


class PPOTrainModule(GRPOTrainModule):
    """GRPO's rollout step with PPO's scores, advantages and updates; the value model trains beside the policy."""

    kl_in_loss = False  # the KL lowers each token's reward instead

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        section: PPOSection,
        parts: RolloutParts,
        *,
        value: ValueModel,
        reward_model: torch.nn.Module | None = None,
        held_out_scorer: RewardScorer | None = None,
        **options: Any,
    ):
        """GRPO's parts and ``section`` (the ``ppo`` section), the value model that trains beside the policy, the
        frozen reward model (None: the reward functions alone score) and the held-out prompts' scorer."""
        super().__init__(model, optimizer, section, parts, **options)
        self.value = value
        if reward_model is not None:  # its scores fill the last reward column of every round the sampler generates
            self.sampler.rescore = partial(
                score_with_reward_model, reward_model, self.sampler, self.logps, self.autocast
            )
        self.num_ppo_epochs, self.num_mini_batches = section.num_ppo_epochs, section.num_mini_batches
        self.kl_coef, self.kl_estimator = section.kl_coef, section.kl_estimator
        self.whiten_rewards = section.whiten_rewards
        self.gamma, self.lam = section.gamma, section.lam
        self.cliprange, self.cliprange_value = section.cliprange, section.cliprange_value
        self.vf_coef = section.vf_coef
        self.missing_eos_penalty, self.eos_token_id = section.missing_eos_penalty, parts.tokenizer.eos_token_id
        # held-out prompts are scored by the reward functions alone (None: the training scorer, when it has no
        # reward-model column to fill)
        if held_out_scorer is not None:
            self.held_out_scorer = held_out_scorer

    @staticmethod
    def settings(section: PPOSection) -> RolloutSettings:  # type: ignore[override]
        """The ``ppo`` section's sampling settings: one completion per prompt, the KL coefficient as beta (the
        per-token KL lowers the rewards: ``score_rollouts``), the scores unscaled."""
        return RolloutSettings(
            num_generations=1,
            max_completion_length=section.response_length,
            temperature=section.temperature,
            beta=section.kl_coef,
            scale_rewards="none",
            sample_interval=section.sample_interval,
        )

    # --- rollout: scores, per-token rewards, values, advantages -------------------------------------------------
    @torch.no_grad()
    def score_rollouts(
        self, rewards: torch.Tensor, rollouts: dict[str, torch.Tensor], *, dry_run: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """TRL's rollout steps 2-6: the scores (reward model + functions, less ``missing_eos_penalty``), the
        per-token rewards with the KL penalty, the values and GAE; kept in ``rollouts`` for the updates."""
        micro_batches = self.logps.micro_rollouts(rollouts)
        mask = rollouts["completion_mask"]
        scores = rewards.to(self.device, torch.float32)
        contains_eos = torch.zeros_like(scores, dtype=torch.bool)
        if self.eos_token_id is not None:
            contains_eos = ((rollouts["completion_ids"] == self.eos_token_id) & mask.bool()).any(1)
        if self.missing_eos_penalty is not None:
            scores = torch.where(contains_eos, scores, scores - self.missing_eos_penalty)
        logps = torch.cat([self.logps(self.model, m) for m in micro_batches]).float()
        ref_logps = self.logps.reference(self.model, rollouts).float() if self.kl_coef != 0.0 else logps
        values = torch.cat([token_values(self.value.model, m, self.autocast) for m in micro_batches])
        token_rewards, kl = ppo_rewards(
            scores, logps, ref_logps, mask, kl_coef=self.kl_coef, kl_estimator=self.kl_estimator,
            whiten_rewards=self.whiten_rewards,
        )  # fmt: skip
        advantages, returns = ppo_advantages(token_rewards, values, mask, gamma=self.gamma, lam=self.lam)
        _, response_p1 = response_masks(mask)
        rollouts.update(advantages=advantages, returns=returns, values=values.masked_fill(~response_p1, 0))
        rollouts["old_logps"] = logps
        if self.trainer is not None and not dry_run:
            non_score = (-self.kl_coef * kl).sum(1)
            for name, value in {
                "objective/kl": kl.sum(1).mean(),
                "objective/scores": scores.mean(),
                "objective/non_score_reward": non_score.mean(),
                "objective/rlhf_reward": (non_score + scores).mean(),
                "val/num_eos_tokens": contains_eos.float().sum(),
            }.items():
                self.trainer.record_metric(f"train/{name}", value, ReduceType.mean)
        per_row = (advantages * mask).sum(1) / mask.sum(1).clamp(min=1)  # what the samples show
        return per_row, torch.zeros_like(per_row)

    # --- updates ---------------------------------------------------------------------------------------------
    def learn(self, rollouts: dict[str, torch.Tensor], *, dry_run: bool = False) -> None:
        """``num_ppo_epochs`` passes, each over a fresh seeded order of the rows cut into ``num_mini_batches``
        optimizer steps (the loop takes the last); ``train/loss`` is the last step's."""
        rows = {key: rollouts[key] for key in (*PPO_KEYS, "old_logps")}
        count = int(rows["input_ids"].shape[0])
        if count % self.num_mini_batches:  # the recipe checks it at launch
            raise ValueError(f"{count} rollouts do not cut into {self.num_mini_batches} mini-batches")
        size = count // self.num_mini_batches
        step = self.trainer.global_step if self.trainer is not None else 0
        sums: dict[str, torch.Tensor] = {}
        update = 0
        for epoch in range(self.num_ppo_epochs):
            generator = torch.Generator().manual_seed((self.seed * 1_000_003 + step) * 101 + epoch)  # resumable
            order = torch.randperm(count, generator=generator).to(self.device)
            for start in range(0, count, size):
                if update:  # the previous mini-batch's optimizer step; the loop takes the last one
                    unrecorded_optim_step(self)
                    self.zero_grads()
                picked = {key: value[order[start : start + size]] for key, value in rows.items()}
                micro_batches = stack_collate.split(picked, self.micro_batch_size)
                scale = torch.tensor(
                    1.0 / len(micro_batches), device=self.device
                )  # TRL's accumulation: the mean over micro-batches (ranks: DDP's)
                loss_sum = self.backward_each(micro_batches, lambda micro: self.ppo_loss(micro, sums), scale)
                last = epoch == self.num_ppo_epochs - 1 and start + size == count
                self.record_loss(loss_sum * scale, cross_entropy=False, dry_run=dry_run or not last)
                update += 1
        if self.trainer is not None and not dry_run:
            for name, total in sums.items():
                self.trainer.record_metric(f"train/{name}", total / sums["count"], ReduceType.mean)

    def ppo_loss(self, micro: dict[str, torch.Tensor], sums: dict[str, torch.Tensor]) -> torch.Tensor:
        """One micro-batch's clipped policy loss plus ``vf_coef`` × its clipped value loss (their stats added to
        ``sums``)."""
        mask = micro["completion_mask"]
        logps = self.logps(self.model, micro).float()
        predicted = token_values(self.value.model, micro, self.autocast)
        old, advantages = micro["old_logps"], micro["advantages"]
        pg_loss, pg_clipfrac, ratio = ppo_policy_loss(logps, old, advantages, mask, self.cliprange)
        vf_loss, vf_clipfrac = ppo_value_loss(predicted, micro["values"], micro["returns"], mask, self.cliprange_value)
        with torch.no_grad():
            response, _ = response_masks(mask)
            diff = (logps - micro["old_logps"]).masked_fill(~response, 0)
            stats = {
                "loss/policy_avg": pg_loss,
                "loss/value_avg": vf_loss,
                "policy/clipfrac_avg": pg_clipfrac,
                "val/clipfrac_avg": vf_clipfrac,
                "policy/approxkl_avg": 0.5 * (diff**2).mean(),
                "val/ratio": ratio.mean(),
                "count": torch.ones((), device=mask.device),
            }
            for key, value in stats.items():
                sums[key] = sums[key] + value.detach() if key in sums else value.detach()
        return pg_loss + self.vf_coef * vf_loss

    # --- the value model steps and zeroes with the policy ------------------------------------------------------
    def zero_grads(self) -> None:
        """Reset the policy's and the value model's gradients."""
        super().zero_grads()
        self.value.zero_grad()

    def optim_step(self) -> None:
        """Step the policy (``BaseTrainModule.optim_step``), then the value model at the same LR factor (skipped
        with the policy's step when the loss is not finite)."""
        super().optim_step()
        if self.updater.skips(self._step_loss):
            self.value.zero_grad()
            return
        dims = self.parallel_dims
        group = dims.group("dp") if dims is not None and dims.dp_size > 1 else None
        norm = self.value.step(self.current_lr_factor(), group)
        if self.trainer is not None:
            self.trainer.record_metric("optim/value_grad_norm", norm, ReduceType.max)

    def extra_state_dict(self) -> dict[str, Any]:
        """The base's extras and the value model with its optimizer."""
        return {**super().extra_state_dict(), "value": self.value.state_dict()}

    def load_extra_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what ``extra_state_dict`` returned."""
        super().load_extra_state_dict(state_dict)
        if "value" in state_dict:
            self.value.load_state_dict(state_dict["value"])


def score_with_reward_model(
    reward_model: torch.nn.Module,
    sampler: GroupSampler,
    logps: CompletionLogps,
    autocast: Callable[[], AbstractContextManager],
    groups: GeneratedGroups,
) -> None:
    """Put the reward model's score of each sampled completion in the groups' last reward column (the recipe's
    ``reward_model``, zeros until here)."""
    tensors = sampler.rollout_tensors(groups)
    scores = [sequence_scores(reward_model, m, autocast) for m in logps.micro_rollouts(tensors)]
    column = groups.rewards_per_func
    column[:, -1] = torch.cat(scores).to(column.device, column.dtype)
