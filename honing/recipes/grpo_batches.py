"""The checks of a GRPO / RLOO step's batch that need the run's data-parallel size, known only at launch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from honing.errors import ConfigError

if TYPE_CHECKING:
    from honing.config import RunConfig
    from honing.config.method_schema import GRPOSection
    from honing.config.rloo_schema import RLOOSection


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
