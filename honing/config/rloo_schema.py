"""The ``rloo`` section (``method: rloo``): TRL's RLOOConfig keys."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from honing.config.filter_groups_schema import FilterGroupsSection
from honing.config.grpo_loss_schema import check_reward_weights
from honing.config.grpo_schema import GRPORewardSection
from honing.config.grpo_validation_schema import GRPOValidationSection
from honing.config.rollout_schema import RolloutSection


class RLOOSection(RolloutSection):
    """RLOO (``method: rloo``): G completions per prompt, scored by the rewards; the advantage of each is its reward
    minus the mean of the other G−1 (the leave-one-out baseline), the KL to the reference is subtracted from the
    reward, and the clipped surrogate is on whole-sequence ratios (TRL's RLOOTrainer). Defaults are TRL's
    RLOOConfig's."""

    num_generations: int = Field(default=2, ge=2)
    """G: completions sampled per prompt (a group)."""
    beta: float = Field(default=0.05, ge=0)
    """The weight of the KL to the reference model subtracted from each completion's reward; 0: no reference."""
    kl_estimator: Literal["k1", "abs", "k2", "k3", "low_var_kl"] = "k1"
    """The per-token estimate of KL(policy ‖ reference) summed over each completion's tokens before it is weighted
    and subtracted from its reward (``grpo.kl_estimator``'s names): ``k1`` (TRL's RLOO) log π − log π_ref."""
    epsilon: float = Field(default=0.2, ge=0)
    """The clipping range of the sequence probability ratio (its lower side, and its upper one unless
    ``epsilon_high``)."""
    epsilon_high: float | None = Field(default=None, ge=0)
    """The upper clipping range; None: ``epsilon``."""
    num_iterations: int = Field(default=1, ge=1)
    """Passes over each rollout batch (TRL's key), as ``grpo.num_iterations``."""
    steps_per_generation: int = Field(default=1, ge=1)
    """Optimizer steps each rollout batch is cut into, as ``grpo.steps_per_generation`` (TRL's key counts per-device
    batches: TRL's / ``gradient_accumulation_steps``; a trainer step is the whole rollout batch)."""
    normalize_advantages: bool = False
    """Standardise the advantages over the step's completions (every rank's)."""
    reward_clip_range: tuple[float, float] | None = None
    """Each completion's summed reward clipped to [low, high] before the baseline; None: not clipped."""
    rewards: list[GRPORewardSection] = Field(default_factory=list)
    """The rewards each completion is scored with; at least one (checked by the recipe)."""
    reward_weights: list[float] | None = None
    """One weight per reward of ``rewards`` (TRL's key), in place of their ``weight``; None: each reward's own."""
    mask_truncated_completions: bool = False
    """Completions that reached ``max_completion_length`` without a stop token get no loss (TRL's key); they are
    still scored and counted in the metrics."""
    sample_interval: int | None = Field(default=10, ge=1)
    """Completions go to samples.jsonl / W&B every N steps; None: never."""
    filter_groups: FilterGroupsSection = Field(default_factory=FilterGroupsSection)
    """DAPO's dynamic sampling: groups of equal rewards dropped and refilled."""
    validation: GRPOValidationSection = Field(default_factory=GRPOValidationSection)
    """How ``data.validation``'s held-out prompts are sampled at each evaluation (scored by ``rloo.rewards``)."""

    @model_validator(mode="after")
    def _clip_range_is_ordered(self) -> RLOOSection:
        check_reward_weights(self, "rloo")
        if self.reward_clip_range is not None and self.reward_clip_range[0] > self.reward_clip_range[1]:
            raise ValueError(
                f"rloo.reward_clip_range: expected [low, high] with low <= high, got {self.reward_clip_range}"
            )
        return self
