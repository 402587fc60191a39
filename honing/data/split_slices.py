"""Slices of a split as ``datasets`` writes them: ``train[:1000]``, ``train[90%:]``, ``test[10%:20%]``,
``train[-500:]`` — in a source path (``owner/name:train[90%:]``, ``folder:train[:10%]``) and in the other systems'
configs (Oumi's ``split``, LLaMA-Factory's ``split``), read with ``datasets``' own rules (``ReadInstruction``:
percent boundaries rounded to the closest row), so a slice takes the rows it takes there."""

from __future__ import annotations

from typing import Any

from honing.errors import DataError

#: a split name with an optional slice, as datasets' ``split=`` argument takes it
SPLIT_WITH_SLICE = r"[\w.-]+(?:\[[^\]]*\])?"


def split_name(split: str) -> str:
    """The split a sliced name reads from: ``train`` of ``train[90%:]``."""
    return split.split("[", 1)[0]


def is_sliced(split: str | None) -> bool:
    """True for a split with a slice (``train[:10%]``)."""
    return split is not None and "[" in split


def check_slice(split: str, where: str) -> None:
    """Refuse, in one line naming ``where``, a slice ``datasets`` cannot read."""
    from datasets import ReadInstruction

    try:
        ReadInstruction.from_spec(split)
    except (ValueError, AssertionError) as error:
        raise DataError(
            f"{where}: {split!r} is no split slice datasets reads ({error}); e.g. 'train[:1000]' or 'train[90%:]'"
        ) from None


def slice_rows(dataset: Any, split: str, where: str) -> Any:
    """The rows of an already loaded split ``dataset`` that the slice in ``split`` selects."""
    from datasets import ReadInstruction

    check_slice(split, where)
    name = split_name(split)
    (bounds,) = ReadInstruction.from_spec(split).to_absolute({name: len(dataset)})
    return dataset.select(range(bounds.from_, bounds.to))
