"""GRPO's section (``method: grpo``) and its rewards (``GRPORewardSection``, which RLOO, PPO and online DPO list
too)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from honing.config.filter_groups_schema import FilterGroupsSection
from honing.config.grpo_loss_schema import (
    GRPOLossType,
    check_loss_keys,
    check_reward_weights,
    scale_rewards_name,
)
from honing.config.grpo_validation_schema import GRPOValidationSection
from honing.config.rollout_schema import RolloutSection
from honing.config.section import Section


class GRPORewardSection(Section):
    """One reward: a built-in name (``honing.rl.builtin_rewards``) or ``package.module:function``, and its weight."""

    name: str
    """A built-in reward's name (``honing.rl.builtin_rewards``), ``package.module:function``, or
    ``reward_model:PATH`` (a trained reward model's folder, e.g. ``runs/reward/hf``)."""
    weight: float = 1.0
    """The reward's weight in the sum of rewards each completion gets."""


class GRPOSection(RolloutSection):
    """GRPO (``method: grpo``): G completions per prompt, scored by the rewards, trained on with TRL's
    group-relative clipped policy-gradient loss. Defaults are TRL's GRPOConfig's."""

    beta: float = Field(default=0.0, ge=0)
    """The KL penalty's weight against a reference model; 0: no reference model."""
    kl_estimator: Literal["k1", "abs", "k2", "k3", "low_var_kl"] = "k3"
    """The per-token estimate of KL(policy ‖ reference) in the loss (verl's ``kl_loss_type`` names): ``k3`` (TRL's)
    π_ref/π − log(π_ref/π) − 1; ``k1`` log π − log π_ref; ``abs`` its magnitude; ``k2`` ½(log π − log π_ref)²;
    ``low_var_kl`` k3 with verl's clamps (log-ratio to [−20, 20], estimate to [−10, 10])."""
    use_bias_correction_kl: bool = True
    """Multiply the KL term by the probability ratio, so its gradient is the unbiased reverse-KL gradient (TRL's key
    and default); false: the estimate alone, as verl's ``use_kl_loss``."""
    epsilon: float = Field(default=0.2, ge=0)
    """The clipping range of the probability ratio (its lower side, and its upper one unless ``epsilon_high``)."""
    epsilon_high: float | None = Field(default=None, ge=0)
    """The upper clipping range (DAPO's clip-higher); None: ``epsilon``. With ``loss_type: cispo`` the cap ε_max of
    the importance weight itself (ScaleRL recommends 5.0)."""
    delta: float | None = Field(default=None, gt=0)
    """Two-sided clipping (INTELLECT-2; TRL's key): the unclipped ratio also capped at delta (recommended > 1 +
    ``epsilon``); None: off. Clipped loss types only (grpo, bnpo, dr_grpo, dapo, luspo)."""
    loss_type: GRPOLossType = "dapo"
    """The loss (TRL's ``loss_type``): the clipped surrogate normalised per sequence (``grpo``), per micro-batch's
    tokens (``bnpo``), by completions × ``max_completion_length`` (``dr_grpo``) or by the step's tokens (``dapo``);
    ``cispo`` (MiniMax-M1: the clipped, detached weight times the log-prob, per token), ``sapo`` (a sigmoid gate of
    temperature ``sapo_temperature_*`` in place of the clip, per sequence), ``luspo`` (each sequence's loss times its
    length; use ``importance_sampling_level: sequence``), ``vespo`` (a gamma weight of the sequence ratio, per
    token)."""
    sapo_temperature_pos: float = Field(default=1.0, gt=0)
    """``sapo`` only: the gate's temperature for tokens of positive advantage (TRL's key and default)."""
    sapo_temperature_neg: float = Field(default=1.05, gt=0)
    """``sapo`` only: the gate's temperature for tokens of non-positive advantage (TRL's key and default)."""
    vespo_k_pos: float = 2.0
    """``vespo`` only: the power k of the weight w^k·e^(λ(1−w)) for non-negative advantages (TRL's key)."""
    vespo_lambda_pos: float = 3.0
    """``vespo`` only: the decay λ of that weight for non-negative advantages (TRL's key)."""
    vespo_k_neg: float = 3.0
    """``vespo`` only: the power k for negative advantages (TRL's key)."""
    vespo_lambda_neg: float = 2.0
    """``vespo`` only: the decay λ for negative advantages (TRL's key)."""
    scale_rewards: Literal["group", "batch", "none"] = "group"
    """Advantages are divided by the rewards' standard deviation over the group, the batch, or not at all (TRL's
    bools too: true is ``group``, false ``none``)."""
    multi_objective_aggregation: Literal["sum_then_normalize", "normalize_then_sum"] = "sum_then_normalize"
    """How several rewards make one advantage (TRL's key): their weighted sum, then ``scale_rewards``; or GDPO's
    ``normalize_then_sum``: each reward standardised within its group, the weighted sum standardised over the whole
    batch (``scale_rewards`` is then not read)."""
    mask_truncated_completions: bool = False
    """Completions that reached ``max_completion_length`` without a stop token get no loss (DAPO's overlong
    filtering; TRL's key); they are still scored and counted in the metrics."""
    top_entropy_quantile: float = Field(default=1.0, ge=0, le=1)
    """ρ of Beyond the 80/20 Rule (TRL's key): only the completion tokens whose entropy is in the top ρ quantile of
    each micro-batch (over every rank) train the policy (the KL term keeps every token); 1: all tokens. The entropies
    need the completions' full logits (the chunked head gives log-probs only)."""
    entropy_coef: float = 0.0
    """The entropy bonus (TRL's key): the loss minus entropy_coef x the mean token entropy of each micro-batch (over
    the tokens the policy trains), averaged over the optimizer step's micro-batches, whatever the loss type; 0: none.
    With ``use_adaptive_entropy``: the starting coefficient."""
    use_adaptive_entropy: bool = False
    """Skywork-OR1's adaptive control (TRL's key): after each optimizer step the coefficient moves by
    ``entropy_coef_delta``, up while the step's entropy over every rank is at or below ``entropy_target`` and down
    above it, within [``entropy_coef_min``, ``entropy_coef_max``]; it is applied only while that entropy is at or
    below the target. Its state is checkpointed."""
    entropy_coef_min: float = 0.0
    """``use_adaptive_entropy``: the coefficient's lower bound (TRL's key and default)."""
    entropy_coef_max: float = 1.0
    """``use_adaptive_entropy``: the coefficient's upper bound (TRL's key and default)."""
    entropy_coef_delta: float = Field(default=0.005, ge=0)
    """``use_adaptive_entropy``: the coefficient's change per optimizer step (TRL's key and default)."""
    entropy_target: float = Field(default=0.2, ge=0)
    """``use_adaptive_entropy``: the target mean token entropy, in nats (TRL's key and default)."""
    off_policy_mask_threshold: float | None = Field(default=None, ge=0)
    """DeepSeek-V3.2's off-policy sequence mask (TRL's key): a completion of negative advantage whose mean token
    KL(sampling policy ‖ current policy) is above it gets no policy loss (the KL term stays); the sampling policy's
    log-probs are those of the policy that sampled (``num_iterations`` / ``steps_per_generation`` > 1: the update's
    old ones; else the KL is 0). None: off."""
    importance_sampling_level: Literal["token", "sequence", "sequence_token"] = "token"
    """The probability ratio that is clipped (TRL's key): per token, or GSPO's one per completion, exp of the mean
    log-ratio (``sequence``; GSPO pairs it with ``loss_type: grpo``), or GSPO-token (``sequence_token``: that value
    on each token, each token's own gradient)."""
    num_iterations: int = Field(default=1, ge=1)
    """Passes over each rollout batch (μ of the GRPO paper; TRL's key): each an optimizer step per
    ``steps_per_generation`` part, the ratio clipped to the log-probs of the policy that sampled; all inside the one
    trainer step of the rollout batch."""
    steps_per_generation: int = Field(default=1, ge=1)
    """Optimizer steps each rollout batch (the step's ``data.global_batch_size`` prompts, sampled once) is cut into,
    whole groups each, the ratio clipped to the log-probs of the policy that sampled (verl's ``train_batch_size /
    ppo_mini_batch_size``; TRL's key counts per-device batches instead: TRL's ``steps_per_generation`` /
    ``gradient_accumulation_steps``). A trainer step is the whole rollout batch, its ``steps_per_generation`` x
    ``num_iterations`` optimizer steps inside it: ``max_duration``, the intervals and the LR schedule count rollout
    batches (the LR held for its updates, as verl's; TRL's count optimizer steps). The prompts on each rank must
    divide by it (checked at launch)."""
    micro_batch_completions: int | None = Field(default=None, ge=1)
    """Completions per forward / backward pass (TRL's ``per_device_train_batch_size``, verl's
    ``ppo_micro_batch_size_per_gpu``): a group may then span micro-batches (its advantages are computed first);
    None: ``data.micro_batch_size`` prompts x ``num_generations``, whole groups. It must divide each optimizer
    step's completions on a rank (checked at launch)."""
    completions_per_rank: int | None = Field(default=None, ge=1)
    """Completions each data-parallel rank samples per rollout batch (TRL's ``per_device_train_batch_size`` x
    ``steps_per_generation``), in place of ``data.global_batch_size`` / ``batch_size_per_rank``: the step's prompts
    are this x the ranks / ``num_generations``, the same on every rank, and a group may span ranks (each rank samples
    its slice of the (prompt, completion) pairs; the rewards are gathered to normalise whole groups, as TRL's
    RepeatSampler). Checked at launch on the real world size; None: groups stay on one rank."""
    rewards: list[GRPORewardSection] = Field(default_factory=list)
    """The rewards each completion is scored with; at least one (checked by the recipe)."""
    reward_weights: list[float] | None = None
    """One weight per reward of ``rewards`` (TRL's key), in place of their ``weight``; None: each reward's own."""
    sample_interval: int | None = Field(default=10, ge=1)
    """Completions go to samples.jsonl / W&B every N steps; None: never."""
    validation: GRPOValidationSection = Field(default_factory=GRPOValidationSection)
    """How ``data.validation``'s held-out prompts are sampled at each evaluation (scored by ``grpo.rewards``)."""
    filter_groups: FilterGroupsSection = Field(default_factory=FilterGroupsSection)
    """DAPO's dynamic sampling: groups of equal rewards dropped and refilled."""

    @field_validator("scale_rewards", mode="before")
    @classmethod
    def _scale_rewards_bool(cls, value: object) -> object:
        return scale_rewards_name(value)

    @model_validator(mode="after")
    def _keys_of_the_loss(self) -> GRPOSection:
        check_loss_keys(self, "grpo")
        check_reward_weights(self, "grpo")
        if "scale_rewards" in self.model_fields_set and self.multi_objective_aggregation == "normalize_then_sum":
            raise ValueError(
                "grpo.scale_rewards is not read with multi_objective_aggregation: normalize_then_sum (TRL's "
                "standardises over the batch); remove it"
            )
        return self
