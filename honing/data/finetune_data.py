"""A fine-tuning method's data, built through its row kind (``honing.data.row_kind``): the splits' rows read once,
fitted and batched into the training loader and the validation batches (per source when there are several), with
each split's data report."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from honing.data.eval_batches import EvalBatches, SourceBatches
from honing.data.loader import Collate, DataLoader, DataPlacement, MapDataset, training_loader
from honing.data.report import DataReport
from honing.data.row_kind import RowKind
from honing.data.splits import read_splits
from honing.data.validation_parts import validation_batches

if TYPE_CHECKING:
    from honing.config.data_schema import DataSection


@dataclass
class RunData:
    """What a recipe's data step makes: the training loader, the validation batches (None without validation),
    the collator that splits a batch into micro-batches, and each split's data report."""

    train_loader: DataLoader
    eval_batches: EvalBatches | SourceBatches | None
    collator: Collate
    reports: dict[str, DataReport] = field(default_factory=dict)


def build_finetune_data(
    kind: RowKind,
    data: DataSection,
    place: DataPlacement,
    *,
    validation: bool = True,
    finish: Callable[[Any], Any] | None = None,
) -> RunData:
    """``kind``'s training loader and validation batches from the ``data`` section; ``finish`` is applied to each
    dataset before it is batched (DPO's precomputed reference log-probs)."""
    splits = read_splits(
        kind, data, seed=place.seed, cache_dir=place.cache_dir, validation=validation, progress=place.progress
    )

    def batched(part: tuple[Any, list[int]], split: str) -> tuple[Any, Any, DataReport]:
        fitted, report = kind.fit(*part, split)
        dataset, collate = kind.dataset(fitted, report)
        if finish is not None:
            finish(dataset)
        return dataset, collate, report

    train, collator, report = batched(splits["train"], "train")
    loader = training_loader(train, collator, data, place, group_by_length=kind.group_by_length)
    reports = {"train": report} if report is not None else {}  # GRPO's prompts have none
    if not splits.get("validation", (None, []))[1]:
        return RunData(loader, None, collator, reports)

    def validation_part(part: tuple[Any, list[int]]) -> tuple[EvalBatches, DataReport]:
        dataset, collate, part_report = batched(part, "validation")
        return evaluation_batches(dataset, collate, place), part_report

    sources = data.validation.sources if data.validation is not None else []
    eval_batches, validation_report = validation_batches(sources, splits["validation"], validation_part)
    if validation_report is not None:  # GRPO's held-out prompts have none
        reports["validation"] = validation_report
    return RunData(loader, eval_batches, collator, reports)


def evaluation_batches(dataset: MapDataset, collate: Collate, place: DataPlacement) -> EvalBatches:
    """This rank's validation batches of ``dataset``."""
    return EvalBatches(
        dataset, batch_size=place.eval_batch_size, collate_fn=collate, rank=place.rank, world_size=place.world_size
    )
