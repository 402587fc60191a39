"""The named data sets and how a source finds one: by ``dataset: NAME``, or by a ``path`` that is a registered hub id;
each row is then built from the data set's own columns into a row of honing's formats."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from honing.data.example_types import RowError
from honing.data.named.entry import Gives, NamedDataset
from honing.data.named.file_formats import FILE_FORMATS, same_row
from honing.data.named.instructions import INSTRUCTIONS
from honing.data.named.reasoning import REASONING
from honing.data.named.vision import VISION
from honing.errors import DataError

NAMED_DATASETS: tuple[NamedDataset, ...] = (*REASONING, *INSTRUCTIONS, *VISION, *FILE_FORMATS)
# Hub ids are matched without case, as the Hub resolves them.
_BY_NAME = {name.lower(): entry for entry in NAMED_DATASETS for name in entry.names}
# the keys of rows already in one of honing's prompt or conversation formats (verl's Parquet made from the data set)
BUILT_ROW_KEYS = ("prompt", "messages")


def named_dataset(name: str) -> NamedDataset:
    """The data set ``name`` (honing's name or a hub id); a DataError listing the names otherwise."""
    entry = _BY_NAME.get(name.lower())
    if entry is None:
        raise DataError(
            f"dataset {name!r} is not a named data set; expected one of: "
            f"{', '.join(entry.name for entry in NAMED_DATASETS)} (or their hub ids, docs/data.md), or no dataset "
            "to read the rows by their own keys"
        )
    return entry


def register_named_dataset(entry: NamedDataset) -> None:
    """Add a data set registered at run time (Oumi's ``@register_dataset`` class, ``honing.interop.oumi``); it
    replaces one registered before under its name, and a name of honing's own data sets is a DataError."""
    built_in = {name.lower() for named in NAMED_DATASETS for name in named.names}
    if entry.name.lower() in built_in:
        raise DataError(
            f"dataset name {entry.name!r} is one of honing's named data sets (docs/data.md): register the class "
            "under another name"
        )
    _BY_NAME[entry.name.lower()] = entry


def hub_dataset(path: str) -> NamedDataset | None:
    """The data set whose hub id ``path`` is (``owner/name`` or ``owner/name:split``), if one is registered."""
    entry = _BY_NAME.get(path.split(":", 1)[0].lower())
    return entry if entry is not None and "/" in path else None


def named_row(entry: NamedDataset, row: Mapping[str, Any]) -> dict[str, Any]:
    """The row in honing's formats: built from the data set's columns, or as it is when it holds a prompt or
    conversation already; a RowError naming the columns expected otherwise."""
    if entry.fits(row):
        return entry.build(row)
    if any(key in row for key in BUILT_ROW_KEYS):
        return dict(row)
    expected = " or ".join(", ".join(map(repr, columns)) for columns in entry.columns)
    raise RowError(
        f"row has the columns {', '.join(map(repr, row)) or 'none'}, not those of the named data set "
        f"{entry.shows()}: {expected}"
    )


def suggested_datasets(row: Mapping[str, Any]) -> str:
    """``'; ...: set the source's dataset: NAME'`` when the row holds a named data set's own columns, else ``''``
    (appended to the one-line error of a row whose format is not detected)."""
    if not isinstance(row, Mapping):
        return ""
    # the file formats' columns are honing's own formats, which detection names already
    fitting = [entry for entry in NAMED_DATASETS if entry.build is not same_row and entry.fits(row)]
    if not fitting:
        return ""
    names = " or ".join(entry.shows() for entry in fitting)
    return f"; these are the columns of the named data set {names}: set the source's dataset: {fitting[0].name}"


def check_gives(entry: NamedDataset, reads: tuple[Gives, ...], where: str) -> None:
    """A DataError when the data set's rows are not what this method reads (countdown's prompts for SFT)."""
    if entry.gives not in reads:
        raise DataError(
            f"{where}: the named data set {entry.shows()} gives {entry.gives}, and this method reads "
            f"{' or '.join(reads)}"
        )
