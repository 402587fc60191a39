"""What a rollout train module (GRPO, RLOO, PPO, online DPO, vision GRPO) is built from: its config section, read
into ``RolloutSettings`` by the module itself, and the ``RolloutParts`` the recipe built (tokenizer, scorer,
reference, rollout server, ...).

The four methods' sections name the shared settings differently (PPO's ``response_length`` is GRPO's
``max_completion_length``), so each module reads its own section into one ``RolloutSettings``; the sampler,
log-probs and policy loss take their values from there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from honing.methods.grpo_entropy_bonus import EntropyBonus, entropy_bonus

if TYPE_CHECKING:
    from honing.config.grpo_schema import GRPOSection
    from honing.config.rloo_schema import RLOOSection
    from honing.methods.grpo_rollouts import RolloutServer
    from honing.methods.grpo_sampling import RefillPrompts
    from honing.methods.grpo_validation import RewardValidation
    from honing.methods.tool_turns import ToolTurns
    from honing.rl.rewards import RewardScorer

#: the loss keys the policy loss reads beside the clipping range (``honing.methods.grpo_policy_loss.PolicyLoss``)
LOSS_OPTION_KEYS = (
    "delta",
    "sapo_temperature_pos",
    "sapo_temperature_neg",
    "vespo_k_pos",
    "vespo_lambda_pos",
    "vespo_k_neg",
    "vespo_lambda_neg",
)


@dataclass(frozen=True)
class RolloutParts:
    """The built objects a rollout train module samples, scores and answers held-out prompts with."""

    tokenizer: Any
    scorer: RewardScorer | Any  # online DPO's judge-only runs: a scorer with no reward columns
    stop_token_ids: list[int]
    seed: int = 0  # the rollouts' randomness comes from (seed, step, prompt index, generation index)
    reference_model: torch.nn.Module | None = None  # the KL reference (None: LoRA's adapters off, or no KL)
    validation: RewardValidation | None = None  # how held-out prompts are answered at an evaluation
    rollout_sampler: RolloutServer | None = None  # vLLM's server or colocated engine (None: the policy samples)
    tool_turns: ToolTurns | None = None  # multi-turn tool calling (None: one completion per sample)
    refill_prompts: RefillPrompts | None = None  # dynamic sampling's refills (None: filter_groups off)
    #: this rank's (prompt, completion) pairs of the step's flattened groups when a group may span ranks
    #: (``grpo.completions_per_rank``: every rank reads the same prompts); None: this rank samples whole groups
    completions: slice | None = None


@dataclass(frozen=True)
class RolloutSettings:
    """The values the sampler, the log-probs and the policy loss read, with GRPO's defaults."""

    num_generations: int
    max_completion_length: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float | None = None
    repetition_penalty: float = 1.0
    beta: float = 0.0
    kl_estimator: str = "k3"
    use_bias_correction_kl: bool = True
    epsilon: float = 0.2
    epsilon_high: float | None = None
    loss_type: str = "dapo"
    scale_rewards: str = "group"
    num_iterations: int = 1
    steps_per_generation: int = 1
    micro_batch_completions: int | None = None
    sample_interval: int | None = None
    importance_sampling_level: str = "token"
    max_num_gen_batches: int | None = None
    mask_truncated_completions: bool = False
    top_entropy_quantile: float = 1.0
    entropy_bonus: EntropyBonus | None = None
    off_policy_mask_threshold: float | None = None
    multi_objective_aggregation: str = "sum_then_normalize"
    scoring_temperature: float | None = None  # None: the sampling temperature
    shared_prompt_forward: bool = True  # each group's prompt computed once in the log-prob forward
    loss_options: dict[str, float | None] = field(default_factory=dict)


def max_num_gen_batches(section: GRPOSection | RLOOSection) -> int | None:
    """DAPO's round limit of dynamic sampling; None when ``filter_groups`` is off."""
    return section.filter_groups.max_num_gen_batches if section.filter_groups.enable else None


SHARED_SETTINGS = (
    "num_generations", "max_completion_length", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "beta",
    "kl_estimator", "epsilon", "epsilon_high", "num_iterations", "steps_per_generation", "sample_interval",
    "mask_truncated_completions", "shared_prompt_forward",
)  # fmt: skip


def sampling_options(settings: RolloutSettings | RewardValidation) -> dict[str, Any]:
    """The sampler's keyword arguments (of the rollouts, or of the held-out prompts): temperature, top_p and top_k,
    and min_p / repetition_penalty where set (a sampler that has no form for them, such as the rollout server's
    client, then refuses them by name)."""
    options: dict[str, Any] = dict(temperature=settings.temperature, top_p=settings.top_p, top_k=settings.top_k)
    if settings.min_p is not None:
        options["min_p"] = settings.min_p
    if settings.repetition_penalty != 1.0:
        options["repetition_penalty"] = settings.repetition_penalty
    return options


def shared_settings(section: GRPOSection | RLOOSection) -> dict[str, object]:
    """The rollout settings the ``grpo`` and ``rloo`` sections name alike, and DAPO's round limit."""
    return {key: getattr(section, key) for key in SHARED_SETTINGS} | {
        "max_num_gen_batches": max_num_gen_batches(section)
    }


def grpo_settings(section: GRPOSection) -> RolloutSettings:
    """The ``grpo`` section's rollout settings."""
    return RolloutSettings(
        **shared_settings(section),  # type: ignore[arg-type]
        use_bias_correction_kl=section.use_bias_correction_kl,
        loss_type=section.loss_type,
        scale_rewards=section.scale_rewards,
        micro_batch_completions=section.micro_batch_completions,
        importance_sampling_level=section.importance_sampling_level,
        top_entropy_quantile=section.top_entropy_quantile,
        entropy_bonus=entropy_bonus(section),
        off_policy_mask_threshold=section.off_policy_mask_threshold,
        multi_objective_aggregation=section.multi_objective_aggregation,
        loss_options={key: getattr(section, key) for key in LOSS_OPTION_KEYS},
    )
