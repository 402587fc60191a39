"""The sections of the methods that have their own: ``grpo`` and ``dpo`` (refused for every other method)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from honing.config.section import Section


class GRPORewardSection(Section):
    """One reward: a built-in name (``honing.rl.builtin_rewards``) or ``package.module:function``, and its weight."""

    name: str
    """A built-in reward's name (``honing.rl.builtin_rewards``) or ``package.module:function``."""
    weight: float = 1.0
    """The reward's weight in the sum of rewards each completion gets."""


class GRPOSection(Section):
    """GRPO (``method: grpo``): G completions per prompt, scored by the rewards, trained on with TRL's
    group-relative clipped policy-gradient loss. Defaults are TRL's GRPOConfig's."""

    num_generations: int = Field(default=8, ge=2)
    """G: completions sampled per prompt (a group)."""
    max_completion_length: int = Field(default=256, ge=1)
    """The longest completion, in tokens."""
    temperature: float = Field(default=1.0, gt=0)
    """The sampling temperature of completions."""
    top_p: float = Field(default=1.0, gt=0, le=1)
    """Nucleus sampling of completions (1: off)."""
    top_k: int = Field(default=0, ge=0)
    """Top-k sampling of completions (0: no top-k filtering)."""
    beta: float = Field(default=0.0, ge=0)
    """The KL penalty's weight against a reference model; 0: no reference model."""
    epsilon: float = Field(default=0.2, ge=0)
    """The clipping range of the probability ratio (its lower side, and its upper one unless ``epsilon_high``)."""
    epsilon_high: float | None = Field(default=None, ge=0)
    """The upper clipping range (DAPO's clip-higher); None: ``epsilon``."""
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo"] = "dapo"
    """How the per-token losses are normalised into one (TRL's ``loss_type``)."""
    scale_rewards: Literal["group", "batch", "none"] = "group"
    """Advantages are divided by the rewards' standard deviation over the group, the batch, or not at all."""
    num_iterations: int = Field(default=1, ge=1)
    """Optimizer steps per rollout batch."""
    rewards: list[GRPORewardSection] = Field(default_factory=list)
    """The rewards each completion is scored with; at least one (checked by the recipe)."""
    sample_interval: int | None = Field(default=10, ge=1)
    """Completions go to samples.jsonl / W&B every N steps; None: never."""


class DPOSection(Section):
    """DPO (``method: dpo``): preference pairs trained with TRL's DPO losses against a frozen reference
    (``copy``: a frozen copy; ``adapters_off``: the LoRA model with its adapters disabled; ``precompute``: the
    reference's log-probs computed once before training and cached on disk). Defaults are TRL's DPOConfig's."""

    loss_type: Literal["sigmoid", "hinge", "ipo", "robust", "apo_zero"] = "sigmoid"
    """The DPO loss (TRL's ``loss_type``): ``sigmoid`` is the paper's."""
    beta: float = Field(default=0.1, gt=0)
    """How far the policy may move from the reference (the paper's beta; higher: closer to the reference)."""
    label_smoothing: float = Field(default=0.0, ge=0, lt=0.5)
    """``robust`` only: the share of preference labels assumed flipped."""
    reference: Literal["copy", "adapters_off", "precompute"] = "copy"
    """The reference model: a frozen ``copy``, the LoRA model with its adapters off, or log-probs precomputed once."""
    rpo_alpha: float | None = Field(default=None, ge=0)
    """Adds ``rpo_alpha`` × the chosen completions' NLL to the loss (RPO); None: not added."""
    packed_pairs: bool = True
    """A micro-batch's pairs in one row without padding, attended pair by pair (sdpa / eager attention; not under
    ``parallel.compile``); false: one right-padded row per pair under a dense 4D mask."""

    @model_validator(mode="after")
    def _smoothing_is_robust(self) -> DPOSection:
        if self.label_smoothing and self.loss_type != "robust":
            raise ValueError(
                f"dpo.label_smoothing is used by loss_type 'robust' only (TRL's {self.loss_type!r} ignores it); "
                "set dpo.loss_type: robust or remove it"
            )
        return self
