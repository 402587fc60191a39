"""The ``ppo`` section (``method: ppo``): TRL's PPOConfig keys (its PPOTrainer: a value model, GAE, clipped policy
and value losses, the KL penalty in the reward). Defaults are TRL's PPOConfig's."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from honing.config.grpo_loss_schema import check_reward_weights
from honing.config.grpo_schema import GRPORewardSection
from honing.config.grpo_validation_schema import GRPOValidationSection
from honing.config.section import Section


class PPOSection(Section):
    """PPO (``method: ppo``): one completion per prompt, scored by a reward model and / or the reward functions; the
    KL to the reference is a per-token penalty in the reward, a value model (a scalar head on a copy of the reward
    model's body, or of the policy's) gives GAE's baseline, and each rollout batch trains ``num_ppo_epochs`` times
    in ``num_mini_batches`` optimizer steps with the clipped policy and value losses (TRL's ``PPOTrainer``)."""

    num_ppo_epochs: int = Field(default=4, ge=1)
    """Passes over each rollout batch, its rows shuffled afresh each pass (TRL's key)."""
    num_mini_batches: int = Field(default=1, ge=1)
    """Optimizer steps each pass is cut into (TRL's key): each rank's rollout batch must divide into them."""
    response_length: int = Field(default=53, ge=1)
    """The longest completion, in tokens (TRL's key; a prompt is kept when it leaves this many of ``data.seq_len``)."""
    temperature: float = Field(default=0.7, gt=0)
    """The sampling temperature; the log-probs of the policy and the reference are taken at it too (TRL's)."""
    stop_token: Literal["eos"] | None = None
    """``eos``: a completion ends at the tokenizer's end-of-sequence (and end-of-turn) token; None (TRL's default):
    completions run ``response_length`` tokens unless ``stop_token_id`` is set."""
    stop_token_id: int | None = Field(default=None, ge=0)
    """A token id that ends a completion (TRL's key); not with ``stop_token``."""
    missing_eos_penalty: float | None = Field(default=None, ge=0)
    """Subtracted from the score of a completion without the end-of-sequence token (TRL's key); None: none."""
    kl_coef: float = Field(default=0.05, ge=0)
    """The weight of the per-token KL penalty in the reward; 0: no reference model."""
    kl_estimator: Literal["k1", "k3"] = "k1"
    """The per-token KL estimate (TRL's key): ``k1`` log π − log π_ref, ``k3`` (r − 1) − log r, r = π_ref / π."""
    whiten_rewards: bool = False
    """Standardise the per-token rewards over each rank's rollout batch, the mean kept (TRL's key)."""
    gamma: float = Field(default=1.0, ge=0, le=1)
    """GAE's discount factor."""
    lam: float = Field(default=0.95, ge=0, le=1)
    """GAE's λ."""
    cliprange: float = Field(default=0.2, ge=0)
    """The clipping range of the per-token probability ratio."""
    cliprange_value: float = Field(default=0.2, ge=0)
    """How far a value prediction may move from the rollout's before its loss is clipped."""
    vf_coef: float = Field(default=0.1, ge=0)
    """The value loss's weight beside the policy loss."""
    reward_model_path: str | None = None
    """A sequence-classification model folder (``method: reward``'s ``SAVE_FOLDER/hf``) that scores each prompt and
    completion on its last token; None: the reward functions alone."""
    value_model_path: str | None = None
    """The value model's start (a model folder, read as a sequence classifier with one label); None: the reward
    model's (TRL's examples), else the policy's own weights with a new scalar head."""
    rewards: list[GRPORewardSection] = Field(default_factory=list)
    """Reward functions added to the reward model's score (``grpo.rewards``' registry); none: the model's alone."""
    reward_weights: list[float] | None = None
    """One weight per reward of ``rewards``, in place of their ``weight``; None: each reward's own."""
    sample_interval: int | None = Field(default=10, ge=1)
    """Completions go to samples.jsonl / W&B every N steps; None: never."""
    validation: GRPOValidationSection = Field(default_factory=GRPOValidationSection)
    """How ``data.validation``'s held-out prompts are sampled at each evaluation (scored by ``ppo.rewards``)."""

    @model_validator(mode="after")
    def _a_score_and_one_stop(self) -> PPOSection:
        check_reward_weights(self, "ppo")  # a score at all is checked by the recipe: the section may stand unused
        if self.stop_token is not None and self.stop_token_id is not None:
            raise ValueError("ppo.stop_token and ppo.stop_token_id both set; give one (TRL refuses both too)")
        return self
