"""``honing plan`` for a run's config: the memory plan, with the vocabulary of the run's own tokenizer where
``model.config`` names none (a byte-level or trained tokenizer decides it: the recipe builds it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from honing.plan.estimate import MemoryEstimate

if TYPE_CHECKING:
    from honing.config import RunConfig


def run_vocab_size(config: RunConfig) -> int | None:
    """The run's tokenizer's vocabulary when ``model.config`` leaves it to the tokenizer; None otherwise."""
    if config.model.config is None or "vocab_size" in (config.model.config or {}):
        return None
    from honing.recipes import recipe_class

    assets = recipe_class(config.method)(config).model_assets()  # the vocabulary follows the run's tokenizer
    return len(assets.tokenizer)


def plan_run(config: RunConfig, *, budget: int | None = None, nproc: int = 1) -> tuple[str, MemoryEstimate]:
    """``honing plan``'s report and estimate for ``config`` on ``nproc`` processes within ``budget`` bytes."""
    from honing.plan import from_config

    return from_config.plan_config(config, budget=budget, nproc=nproc, vocab_size=run_vocab_size(config))
