"""RLOO TrainModule (TRL's RLOOTrainer maths): GRPO's rollouts and sampling, with the leave-one-out baseline as
advantage, the KL to the reference subtracted from the reward (Σ log π − log π_ref per completion, times beta), and
a clipped surrogate on whole-sequence probability ratios, averaged over completions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from honing.distributed import is_distributed
from honing.methods.grpo import GRPOTrainModule
from honing.methods.grpo_estimators import rloo_advantages, rloo_sequence_loss, sequence_kl_penalty
from honing.methods.grpo_loss_stats import LossStats
from honing.methods.grpo_metrics import record_same
from honing.methods.grpo_settings import RolloutSettings, shared_settings

if TYPE_CHECKING:
    from honing.config.rloo_schema import RLOOSection


class RLOOTrainModule(GRPOTrainModule):
    """GRPO's step with RLOO's advantages, KL-in-reward and sequence-level loss."""

    kl_in_loss = False  # the KL lowers the reward instead

    def __init__(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, section: RLOOSection, *args: Any, **kw: Any
    ):
        """GRPO's parts; ``section``: the ``rloo`` section (``settings``), and its advantage options."""
        super().__init__(model, optimizer, section, *args, **kw)
        self.normalize_advantages = section.normalize_advantages
        self.reward_clip_range = section.reward_clip_range

    @staticmethod
    def settings(section: RLOOSection) -> RolloutSettings:  # type: ignore[override]
        """The ``rloo`` section's settings: RLOOTrainer averages the per-completion losses over the step's
        completions (GRPO's ``grpo`` normaliser) of unscaled rewards; its KL is in the reward, summed over each
        completion's tokens (k1 by default, as TRL's)."""
        return RolloutSettings(
            **shared_settings(section),  # type: ignore[arg-type]
            loss_type="grpo",
            scale_rewards="none",
        )

    def score_rollouts(
        self, rewards: torch.Tensor, rollouts: dict[str, torch.Tensor], *, dry_run: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """RLOO's advantages of the (clipped) rewards less beta × each completion's KL to the reference."""
        if self.reward_clip_range is not None:
            rewards = rewards.clamp(min=self.reward_clip_range[0], max=self.reward_clip_range[1])
        if self.policy_loss.beta != 0.0:
            mask = rollouts["completion_mask"]
            with torch.no_grad():
                policy = torch.cat([self.logps(self.model, micro) for micro in self.logps.micro_rollouts(rollouts)])
            reference = self.logps.reference(self.model, rollouts)
            kl = sequence_kl_penalty(policy, reference, mask, self.policy_loss.kl_estimator)
            rewards = rewards - self.policy_loss.beta * kl.to(rewards)
            if self.trainer is not None and not dry_run:
                totals = self.ranks.sum(torch.stack([kl.sum(), mask.sum().to(kl)]).float()).cpu()
                record_same(self.trainer, "kl", totals[0] / totals[1].clamp(min=1.0))
        if not (self.normalize_advantages and is_distributed()):
            advantages, std = rloo_advantages(rewards, self.sampler.num_generations, self.normalize_advantages)
        else:  # standardised over every rank's completions, as TRL's gathered batch
            everyone, mine = self.ranks.gather_dp(rewards, self.device)
            advantages, std = rloo_advantages(everyone, self.sampler.num_generations, True)
            advantages, std = advantages[mine], std[mine]
        rollouts["advantages"] = advantages.to(self.device)
        return advantages, std

    def micro_loss(self, micro: dict[str, torch.Tensor], stats: LossStats) -> torch.Tensor:
        """One micro-batch's summed sequence-level loss (its clipping added to ``stats``)."""
        logps = self.logps(self.model, micro)
        old_logps = micro.get("old_logps", logps.detach())
        epsilon, epsilon_high = self.policy_loss.epsilon, self.policy_loss.upper_epsilon
        losses, ratio = rloo_sequence_loss(
            logps, old_logps, micro["completion_mask"], micro["advantages"], epsilon=epsilon, epsilon_high=epsilon_high
        )
        stats.add(micro["completion_mask"], ratio.detach(), micro["advantages"], None, epsilon, epsilon_high)
        return losses.sum()
