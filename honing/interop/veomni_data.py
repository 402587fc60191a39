"""VeOmni's two data steps on a run's data, as its document writes them on a recipe: ``build_data_transform`` (a
function applied to every training and validation item before collation) and ``build_data_collate_info`` (a
collator, or VeOmni's dict of per-key settings over the method's own, ``honing.interop.veomni_collate``).
``honing.interop.veomni_recipe`` makes them the ``finish_data`` step of a recipe class that writes either."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from honing.interop.veomni_collate import collator_from_info

if TYPE_CHECKING:
    from honing.data.finetune_data import RunData


def with_data_steps(
    data: RunData,
    transform_step: Callable[[], Any] | None,
    collate_step: Callable[[], Any] | None,
    *,
    owner: str,
    sp_size: int,
) -> RunData:
    """``data`` after a recipe's data transform (on every training and validation item) and its collate step (a
    collator, or VeOmni's dict of per-key settings over the data's own; by default the data's own); ``owner``: the
    class that wrote them, ``sp_size``: the run's sequence-parallel size (``parallel.cp``)."""
    transform = transform_step() if transform_step is not None else None
    if transform is not None:
        parts = getattr(data.eval_batches, "parts", {"": data.eval_batches})  # several validation sources
        for batches in (data.train_loader, *parts.values()):
            if hasattr(batches, "dataset"):  # the loader and the validation batches read items from it
                batches.dataset = TransformedDataset(batches.dataset, transform)
    collate_info = collate_step() if collate_step is not None else data.collator
    if isinstance(collate_info, dict):  # VeOmni's per-key (pack_dim, sp_slice, sp_pad_value, sp_pad_scale)
        collate_info = collator_from_info(collate_info, data.collator, owner=owner, sp_size=sp_size)
    return replace(data, collator=collate_info)


class TransformedDataset:
    """``dataset[i]`` as ``transform(dataset[i])``; every other attribute (lengths, tokens per row) is the dataset's."""

    def __init__(self, dataset: Any, transform: Callable[[Any], Any]):
        self.dataset = dataset
        self.transform = transform

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        return self.transform(self.dataset[index])

    def __getattr__(self, name: str) -> Any:
        if name in ("dataset", "transform"):  # not set yet (e.g. while unpickling in a worker)
            raise AttributeError(name)
        return getattr(self.dataset, name)
