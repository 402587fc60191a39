"""The ``online_dpo`` section (``method: online_dpo``): TRL's OnlineDPOConfig keys, with the rewards of GRPO's
registry (functions by name or import path, ``reward_model:PATH``) or a pairwise judge ranking the two completions."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from honing.config.grpo_loss_schema import check_reward_weights
from honing.config.grpo_schema import GRPORewardSection
from honing.config.grpo_validation_schema import GRPOValidationSection
from honing.config.section import Section


class OnlineDPOSection(Section):
    """Online DPO (``method: online_dpo``): two completions sampled per prompt from the current policy, ranked by the
    rewards (their weighted sum, less ``missing_eos_penalty`` where a completion never stopped) or by ``judge``, and
    the DPO loss of the pair against the starting policy (a frozen copy; LoRA: its adapters off). Defaults are TRL's
    OnlineDPOConfig's."""

    max_new_tokens: int = Field(default=64, ge=1)
    """The longest completion, in tokens (TRL's key; a prompt is kept when it leaves this many of ``data.seq_len``)."""
    temperature: float = Field(default=0.9, gt=0)
    """The sampling temperature of completions (their log-probs in the loss are the model's own, at 1, as TRL's)."""
    top_p: float = Field(default=1.0, gt=0, le=1)
    """Nucleus sampling of completions (1: off)."""
    top_k: int = Field(default=0, ge=0)
    """Top-k sampling of completions (0: no top-k filtering)."""
    min_p: float | None = Field(default=None, ge=0, le=1)
    """Min-p sampling of completions, after temperature, top-k and top-p (transformers' ``MinPLogitsWarper``, as
    ``grpo.min_p``); None: off."""
    repetition_penalty: float = Field(default=1.0, gt=0)
    """CTRL's repetition penalty on the prompt's and the completion's tokens (transformers'
    ``RepetitionPenaltyLogitsProcessor``, as ``grpo.repetition_penalty``); 1: off."""
    beta: float = Field(default=0.1, gt=0)
    """DPO's β: how far the policy may move from the reference (IPO's τ with ``loss_type: ipo``)."""
    loss_type: Literal["sigmoid", "ipo"] = "sigmoid"
    """``sigmoid``: −log σ(β·Δ) (DPO); ``ipo``: (Δ − 1/(2β))², Δ the chosen minus the rejected log-ratio to the
    reference, summed over each completion's tokens (TRL's online IPO: no length normalisation)."""
    missing_eos_penalty: float | None = Field(default=None, ge=0)
    """Subtracted from the reward of a completion that reached ``max_new_tokens`` without a stop token, before the
    pair is ranked (TRL's key); None: no penalty. Not applied to a judge's ranking (TRL's neither)."""
    rewards: list[GRPORewardSection] = Field(default_factory=list)
    """The rewards each completion is scored with (``grpo.rewards``' names: built-ins, ``package.module:function``,
    ``reward_model:PATH``); the higher weighted sum is chosen, the first on a tie (TRL's). They also score the held-out
    prompts of ``data.validation``. At least one, unless ``judge`` ranks the pairs (checked by the recipe)."""
    reward_weights: list[float] | None = None
    """One weight per reward of ``rewards`` (TRL's key), in place of their ``weight``; None: each reward's own."""
    judge: str | None = None
    """A pairwise judge ``package.module:function`` called as ``judge(prompts, completions)`` with
    ``completions[i] = [first, second]``, returning per prompt the index (0 or 1) of the better one (TRL's
    ``BasePairwiseJudge.judge``); set, it ranks the pairs and ``rewards`` only score and report. None: the rewards
    rank."""
    sample_interval: int | None = Field(default=10, ge=1)
    """The pairs go to samples.jsonl / W&B every N steps; None: never."""
    validation: GRPOValidationSection = Field(default_factory=GRPOValidationSection)
    """How ``data.validation``'s held-out prompts are sampled at each evaluation (scored by ``online_dpo.rewards``)."""

    @model_validator(mode="after")
    def _weights_fit_the_rewards(self) -> OnlineDPOSection:
        check_reward_weights(self, "online_dpo")
        return self
