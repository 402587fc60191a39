"""The checks and conversions the ``grpo`` and ``rloo`` sections share for TRL's newer keys: the keys only some loss
types read (refused with the others, as TRL would ignore them), ``scale_rewards`` as a bool, and ``reward_weights``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from honing.config.grpo_schema import GRPORewardSection, GRPOSection
    from honing.config.rloo_schema import RLOOSection

GRPOLossType = Literal["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"]

#: the loss types whose ratio is clipped PPO's way (``delta`` caps it; the clip-ratio metrics apply)
CLIPPED = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")
#: key -> the loss types that read it (TRL's GRPOTrainer._compute_loss)
LOSS_TYPE_KEYS = {
    "delta": CLIPPED,
    "sapo_temperature_pos": ("sapo",),
    "sapo_temperature_neg": ("sapo",),
    "vespo_k_pos": ("vespo",),
    "vespo_lambda_pos": ("vespo",),
    "vespo_k_neg": ("vespo",),
    "vespo_lambda_neg": ("vespo",),
}


class RewardsSection(Protocol):
    """A section that scores with weighted rewards (``grpo``, ``rloo``, ``online_dpo``, ``ppo``)."""

    rewards: list[GRPORewardSection]
    reward_weights: list[float] | None


def scale_rewards_name(value: object) -> object:
    """TRL's bools for ``scale_rewards`` (GRPOConfig.__post_init__): true is ``group``, false is ``none``."""
    return {True: "group", False: "none"}.get(value, value) if isinstance(value, bool) else value


def check_loss_keys(section: GRPOSection | RLOOSection, name: str) -> None:
    """Refuse a key set away from its default for a loss type that does not read it (one line naming the key and
    the fix); at its default it changes nothing, as the other sections' loss keys."""
    for key, loss_types in LOSS_TYPE_KEYS.items():
        changed = getattr(section, key) != type(section).model_fields[key].default
        if changed and section.loss_type not in loss_types:
            raise ValueError(
                f"{name}.{key} is used by loss_type {', '.join(loss_types)} only (TRL's {section.loss_type!r} ignores "
                f"it); set {name}.loss_type or remove it"
            )


def check_reward_weights(section: RewardsSection, name: str) -> None:
    """``reward_weights`` (TRL's list, one per reward) and the rewards' own ``weight`` are one setting: refuse both,
    and a list of the wrong length."""
    weights = section.reward_weights
    if weights is None:
        return
    if len(weights) != len(section.rewards):
        raise ValueError(
            f"{name}.reward_weights: {len(weights)} weights for {len(section.rewards)} rewards; give one per reward"
        )
    if any("weight" in reward.model_fields_set for reward in section.rewards):
        raise ValueError(f"{name}.reward_weights and {name}.rewards[].weight both set; give the weights in one place")


def weighted_rewards(section: RewardsSection) -> list[tuple[str, float]]:
    """Each reward's (name, weight): ``reward_weights`` where given, else each reward's own ``weight``."""
    weights = section.reward_weights or [reward.weight for reward in section.rewards]
    return [(reward.name, float(weight)) for reward, weight in zip(section.rewards, weights)]
