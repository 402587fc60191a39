"""The GRPO recipe's choice of estimator and sampling: ``method: grpo`` (token-level or GSPO's sequence-level ratio)
or ``method: rloo`` (RLOO's train module, same rollouts), and DAPO's dynamic sampling (``filter_groups``) with the
training prompts it refills from."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from honing.errors import ConfigError
from honing.methods.grpo_entropy_bonus import entropy_bonus
from honing.methods.grpo_sampling import RefillPrompts

if TYPE_CHECKING:
    from honing.config import RunConfig

log = logging.getLogger(__name__)

#: the losses that sum per-token terms, which weight a sequence-level ratio by completion length (TRL warns too)
TOKEN_SUMMING_LOSSES = ("bnpo", "dr_grpo", "dapo", "cispo")
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


def rollout_section(config: RunConfig) -> Any:
    """The method's own section (``grpo`` or ``rloo``), which must name at least its rewards."""
    method = config.method
    section = getattr(config, method, None)
    if section is None:
        raise ConfigError(
            f"{method}: method '{method}' needs a {method} section, at least {method}.rewards: [{{name: ...}}]"
        )
    return section


def estimator_parts(method: str, section: Any) -> tuple[type, dict[str, Any]]:
    """The train module class and the settings only its estimator reads."""
    if method == "rloo":
        from honing.methods.rloo import RLOOTrainModule

        options = dict(normalize_advantages=section.normalize_advantages, reward_clip_range=section.reward_clip_range)
        options.update(mask_truncated_completions=section.mask_truncated_completions)
        return RLOOTrainModule, dict(options, kl_estimator=section.kl_estimator)
    from honing.methods.grpo import GRPOTrainModule

    level = section.importance_sampling_level
    warn_level_and_loss(level, section.loss_type)
    options = dict(loss_type=section.loss_type, scale_rewards=section.scale_rewards)
    options.update(kl_estimator=section.kl_estimator, use_bias_correction_kl=section.use_bias_correction_kl)
    options.update(mask_truncated_completions=section.mask_truncated_completions)
    options.update(top_entropy_quantile=section.top_entropy_quantile, entropy_bonus=entropy_bonus(section))
    options.update(off_policy_mask_threshold=section.off_policy_mask_threshold)
    options.update(multi_objective_aggregation=section.multi_objective_aggregation)
    options["loss_options"] = {key: getattr(section, key) for key in LOSS_OPTION_KEYS}
    if level != "token":
        options["importance_sampling_level"] = level
    return GRPOTrainModule, options


def warn_level_and_loss(level: str, loss_type: str) -> None:
    """TRL's warnings on a ratio level its loss type was not made for (the run goes on, as TRL's)."""
    if level == "sequence" and loss_type in TOKEN_SUMMING_LOSSES:
        log.warning(
            "grpo.importance_sampling_level: sequence with loss_type %r sums per-token terms, which weights each "
            "completion by its length; GSPO's paper uses grpo.loss_type: grpo",
            loss_type,
        )
    if loss_type == "luspo" and level != "sequence":
        log.warning("grpo.loss_type: luspo is LUSPO's with grpo.importance_sampling_level: sequence (the paper's)")
    if loss_type == "vespo" and level != "token":
        log.warning(
            "grpo.loss_type: vespo computes its sequence weight itself; grpo.importance_sampling_level: token "
            "(TRL's default) is the paper's"
        )


def dynamic_sampling(loader: Any, section: Any, seed: int) -> dict[str, Any]:
    """The train module's dynamic-sampling settings: none when ``filter_groups`` is off, else the round limit and
    the training prompts refills are drawn from (``loader``'s rows, collated as its batches)."""
    if not section.filter_groups.enable:
        return {}
    refill = RefillPrompts(
        loader.dataset,
        loader.collate_fn,
        seed=seed,
        rank=loader.rank,
        world_size=loader.world_size,
    )
    return dict(max_num_gen_batches=section.filter_groups.max_num_gen_batches, refill_prompts=refill)
