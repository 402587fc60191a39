"""The checks of a GRPO / RLOO step's batch that need the run's data-parallel size, known only at launch, and the
step of ``grpo.completions_per_rank``, whose groups may span ranks."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from honing.data.finetune_data import build_finetune_data
from honing.errors import ConfigError
from honing.recipes.base import data_placement

if TYPE_CHECKING:
    from honing.config import RunConfig
    from honing.config.grpo_schema import GRPOSection
    from honing.config.rloo_schema import RLOOSection
    from honing.data.finetune_data import RunData
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


def shared_prompts_data(
    kind: Any, config: RunConfig, dims: ParallelDims, cache_dir: str, shared: SharedGroups, **options: Any
) -> RunData:
    """The run's data read as one rank reads it, ``shared.prompts`` prompts a step, so every rank holds the step's
    prompts (each samples its pairs of them); the held-out prompts too (each rank answers all of them)."""
    data = config.data.model_copy(update={"global_batch_size": shared.prompts, "batch_size_per_rank": None})
    place = replace(data_placement(config, dims, cache_dir), rank=0, world_size=1)
    if config.callbacks.evaluator.batch_size is None:
        place = replace(place, eval_batch_size=shared.prompts)
    return build_finetune_data(kind, data, place, **options)
