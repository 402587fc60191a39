"""The ``reward`` section: a reward model (``method: reward``), TRL's RewardTrainer's settings under its names."""

from __future__ import annotations

from pydantic import Field

from honing.config.section import Section


class RewardSection(Section):
    """A reward model (``method: reward``): a one-label sequence-classification head on the model's body, trained on
    preference pairs with TRL's RewardTrainer loss, −log σ(r_chosen − r_rejected − margin) (a row's ``margin``
    column, 0 without one). Defaults are TRL's RewardConfig's."""

    center_rewards_coefficient: float | None = Field(default=None, ge=0)
    """Adds this × the mean of (r_chosen + r_rejected)² to the loss, pulling rewards towards mean zero (TRL's
    ``center_rewards_coefficient``; its docs recommend 0.01); None: not added."""
    packed_pairs: bool = True
    """A micro-batch's pairs in one row without padding, attended pair by pair (sdpa / eager attention; not under
    ``parallel.compile``); false: one right-padded row per pair under a dense 4D mask."""
