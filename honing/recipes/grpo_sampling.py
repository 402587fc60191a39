"""The GRPO recipe's choice of estimator and sampling: ``method: grpo`` (token-level or GSPO's sequence-level ratio)
or ``method: rloo`` (RLOO's train module, same rollouts), and DAPO's dynamic sampling (``filter_groups``) with the
training prompts it refills from."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from honing.errors import ConfigError
from honing.methods.grpo_sampling import RefillPrompts

if TYPE_CHECKING:
    from honing.config import RunConfig

log = logging.getLogger(__name__)

#: the losses that sum per-token terms, which weight a sequence-level ratio by completion length (TRL warns too)
TOKEN_SUMMING_LOSSES = ("bnpo", "dr_grpo", "dapo", "cispo")


def rollout_section(config: RunConfig) -> Any:
    """The method's own section (``grpo`` or ``rloo``), which must name at least its rewards."""
    method = config.method
    section = getattr(config, method, None)
    if section is None:
        raise ConfigError(
            f"{method}: method '{method}' needs a {method} section, at least {method}.rewards: [{{name: ...}}]"
        )
    return section


def estimator_parts(method: str, section: Any) -> type:
    """The train module class of ``method`` (it reads its settings from ``section`` itself); TRL's warnings on
    GRPO's ratio level and loss type."""
    if method == "rloo":
        from honing.methods.rloo import RLOOTrainModule

        return RLOOTrainModule
    from honing.methods.grpo import GRPOTrainModule

    warn_level_and_loss(section.importance_sampling_level, section.loss_type)
    return GRPOTrainModule


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


def refill_prompts(loader: Any, section: Any, seed: int) -> RefillPrompts | None:
    """The training prompts dynamic sampling refills from (``loader``'s rows, collated as its batches); None when
    ``filter_groups`` is off."""
    if not section.filter_groups.enable:
        return None
    return RefillPrompts(
        loader.dataset,
        loader.collate_fn,
        seed=seed,
        rank=loader.rank,
        world_size=loader.world_size,
    )
