"""The sizes of a GRPO / RLOO rollout step on one rank, and their checks that need the run's data-parallel size:
what the run refuses at launch (``honing.recipes.grpo``) and ``honing plan`` sizes its memory by, one arithmetic for
both (here, below the recipes, so the plan that recipes import reads it without an import circle), the step of
``grpo.completions_per_rank`` (whose groups may span ranks) included."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from honing.errors import ConfigError

if TYPE_CHECKING:
    from honing.config import RunConfig
    from honing.config.grpo_schema import GRPOSection
    from honing.config.rloo_schema import RLOOSection
    from honing.parallel_dims import ParallelDims


def generation_steps(config: RunConfig, section: GRPOSection | RLOOSection, dp_size: int) -> int:
    """``steps_per_generation`` once each rank's prompts are known to divide into that many optimizer steps of whole
    groups (one line naming the keys otherwise)."""
    steps = section.steps_per_generation
    prompts = config.data.rows_per_step(dp_size) // dp_size
    if prompts % steps:
        name = config.method if config.method == "rloo" else "grpo"
        raise ConfigError(
            f"{name}.steps_per_generation ({steps}) must divide the prompts of each rank's rollout batch ({prompts}: "
            f"data.global_batch_size over {dp_size} data-parallel ranks); change one of them"
        )
    return steps


def micro_batch_completions(config: RunConfig, section: GRPOSection | RLOOSection, dp_size: int) -> int | None:
    """``micro_batch_completions`` (None when unset) once it is known to divide each optimizer step's completions
    on a rank (one line naming the keys otherwise)."""
    width = getattr(section, "micro_batch_completions", None)  # GRPO's key; RLOO's section has none
    if width is None:
        return None
    prompts = config.data.rows_per_step(dp_size) // dp_size
    completions = prompts * section.num_generations // section.steps_per_generation
    if completions % width:
        raise ConfigError(
            f"grpo.micro_batch_completions ({width}) must divide each optimizer step's completions on a rank "
            f"({completions}: {prompts} prompts x num_generations {section.num_generations} / steps_per_generation "
            f"{section.steps_per_generation}); change one of them"
        )
    return width


@dataclass(frozen=True)
class SharedGroups:
    """A step whose groups may span ranks (``grpo.completions_per_rank``): every rank reads the step's prompts and
    samples its own slice of the (prompt, completion) pairs, as TRL's RepeatSampler spreads them."""

    prompts: int
    """The step's prompts, the same on every rank: completions per rank x ranks / num_generations."""
    completions_per_rank: int
    """The (prompt, completion) pairs each rank samples."""
    dp_rank: int
    """This rank's place among the data-parallel ranks: its pairs come after those of the ranks before it."""

    @property
    def pairs(self) -> slice:
        """This rank's pairs of the step's flattened groups (prompt-major, as ``repeat_interleave`` lays them)."""
        start = self.dp_rank * self.completions_per_rank
        return slice(start, start + self.completions_per_rank)

    def forward_completions(self, section: GRPOSection) -> int:
        """The completions of one forward and backward on a rank: ``grpo.micro_batch_completions``, or the rank's
        whole optimizer step (its pairs / ``steps_per_generation``)."""
        return section.micro_batch_completions or self.completions_per_rank // section.steps_per_generation


def shared_groups(config: RunConfig, section: GRPOSection | RLOOSection, dims: ParallelDims) -> SharedGroups | None:
    """The step of ``grpo.completions_per_rank`` on the run's real data-parallel size (None when unset), checked in
    one line naming the keys and the numbers."""
    per_rank = getattr(section, "completions_per_rank", None)  # GRPO's key; RLOO's section has none
    if per_rank is None:
        return None
    dp_size, group = dims.dp_size, section.num_generations
    total = per_rank * dp_size
    key = f"grpo.completions_per_rank ({per_rank})"
    given = [
        k for k in ("global_batch_size", "batch_size_per_rank", "micro_batch_size") if k in config.data.model_fields_set
    ]
    if given:
        raise ConfigError(
            f"{key} gives the step's batch in completions: remove data.{given[0]} (the per-rank forward is "
            "grpo.micro_batch_completions)"
        )
    if total % group:
        raise ConfigError(
            f"{key} x {dp_size} data-parallel ranks = {total} completions per step is not a multiple of "
            f"grpo.num_generations ({group}); set grpo.completions_per_rank to a multiple of "
            f"{group // math.gcd(group, dp_size)} or run on a world size that makes it one"
        )
    steps = section.steps_per_generation
    if per_rank % steps:
        raise ConfigError(f"grpo.steps_per_generation ({steps}) must divide {key}; change one of them")
    width = section.micro_batch_completions
    if width is not None and (per_rank // steps) % width:
        raise ConfigError(
            f"grpo.micro_batch_completions ({width}) must divide each optimizer step's completions on a rank "
            f"({per_rank // steps}: {key} / steps_per_generation {steps}); change one of them"
        )
    for asked, why in (
        (section.filter_groups.enable, "grpo.filter_groups.enable (dynamic sampling refills whole groups per rank)"),
        (
            section.multi_objective_aggregation == "normalize_then_sum",
            "grpo.multi_objective_aggregation: "
            "normalize_then_sum (each reward is standardised in its group on one rank)",
        ),
        (bool(section.tools), "grpo.tools (a conversation's turns are sampled per prompt on one rank)"),
    ):
        if asked:
            raise ConfigError(f"{key} lets a group span ranks, which {why} does not; remove one of them")
    return SharedGroups(total // group, per_rank, dims.dp_rank)


@dataclass(frozen=True)
class RankRollouts:
    """One rank's share of a rollout step as the run lays it out."""

    step_prompts: int
    """The step's prompts over all ranks (with groups that span ranks every rank holds all of them)."""
    rank_prompts: int
    """The prompts this rank holds."""
    sampled: int
    """The completions this rank samples at once."""
    forward: int
    """The completions of one forward and backward on this rank."""


def rank_rollouts(config: RunConfig, section: GRPOSection, dims: ParallelDims) -> RankRollouts:
    """The sizes of a GRPO step on one rank of ``dims``, checked as at launch (one line naming the keys otherwise):
    whole groups per rank from ``data.global_batch_size``, or ``grpo.completions_per_rank``'s pairs."""
    shared = shared_groups(config, section, dims)
    if shared is not None:
        prompts = shared.prompts
        return RankRollouts(prompts, prompts, shared.completions_per_rank, shared.forward_completions(section))
    dp_size, group = dims.dp_size, section.num_generations
    generation_steps(config, section, dp_size)
    width = micro_batch_completions(config, section, dp_size)
    step = config.data.rows_per_step(dp_size)
    prompts = step // dp_size
    micro = min(config.data.micro_batch_size or prompts, prompts)  # the module's forward: whole groups unless set
    return RankRollouts(step, prompts, prompts * group, width or micro * group)
