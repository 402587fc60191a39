"""A dataset whose items pass through a function first: a recipe's ``build_data_transform`` (VeOmni's step)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


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
