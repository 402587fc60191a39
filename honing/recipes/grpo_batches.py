"""The data of a GRPO step whose groups may span ranks (``grpo.completions_per_rank``): every rank reads the step's
prompts, the held-out prompts are shared out among the ranks. The step's sizes and their launch checks are
``honing.plan.rollout_batch``'s (one arithmetic for the run and ``honing plan``)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from honing.data.eval_batches import EvalBatches, SourceBatches
from honing.data.finetune_data import build_finetune_data
from honing.recipes.base import data_placement

if TYPE_CHECKING:
    from honing.config import RunConfig
    from honing.data.finetune_data import RunData
    from honing.parallel_dims import ParallelDims
    from honing.plan.rollout_batch import SharedGroups


def shared_prompts_data(
    kind: Any, config: RunConfig, dims: ParallelDims, cache_dir: str, shared: SharedGroups, **options: Any
) -> RunData:
    """The run's data read as one rank reads it, ``shared.prompts`` prompts a step, so every rank holds the step's
    prompts (each samples its pairs of them); the held-out prompts shared out among the ranks as in any run (each
    answers its own batches, the evaluator adds their sums over the ranks)."""
    data = config.data.model_copy(update={"global_batch_size": shared.prompts, "batch_size_per_rank": None})
    place = data_placement(config, dims, cache_dir)
    if config.callbacks.evaluator.batch_size is None:
        place = replace(place, eval_batch_size=shared.prompts)
    run = build_finetune_data(kind, data, replace(place, rank=0, world_size=1), **options)
    return replace(run, eval_batches=rank_share(run.eval_batches, place.rank, place.world_size))


def rank_share(
    batches: EvalBatches | SourceBatches | None, rank: int, world_size: int
) -> EvalBatches | SourceBatches | None:
    """Every held-out batch (as one process reads them) cut to the share of ``rank``: every ``world_size``-th batch,
    each source's alike; answered on every rank, each prompt's reward would count ``world_size`` times."""
    if isinstance(batches, SourceBatches):
        return SourceBatches({name: rank_share(part, rank, world_size) for name, part in batches.parts.items()})
    return None if batches is None else replace(batches, rank=rank, world_size=world_size)
