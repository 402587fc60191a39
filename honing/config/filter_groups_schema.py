"""``grpo.filter_groups`` / ``rloo.filter_groups``: DAPO's dynamic sampling, with verl's keys."""

from __future__ import annotations

from pydantic import Field

from honing.config.section import Section


class FilterGroupsSection(Section):
    """DAPO's dynamic sampling (verl's ``algorithm.filter_groups``): a group whose rewards are all equal has zero
    advantage, so it is dropped and its place refilled with the groups of new training prompts, drawn at random by
    (seed, step, round); at the limit, the places left keep dropped groups. Counted in ``train/num_gen_batches`` and
    ``train/dynamic_sampling/*``."""

    enable: bool = False
    """Drop and refill the groups of equal rewards."""
    max_num_gen_batches: int = Field(default=10, ge=1)
    """Generation rounds per step at most, the first included (verl's name; verl's DAPO recipe uses 10)."""
