"""One named data set: the names it answers to, the columns of its own rows, and the builder that turns such a row
into a row of honing's formats (a prompt row, a conversation, an image conversation or a preference pair)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from honing.data.example_types import RowError

#: what a named data set's rows become, and so which methods read it
Gives = Literal["prompts", "conversations", "image conversations", "preference pairs"]
#: a builder: the data set's own row → a row in one of honing's formats
Builder = Callable[[Mapping[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class NamedDataset:
    """A data set honing reads by name: its own columns in, honing's row out, and the reward that scores it."""

    name: str
    """honing's name for it (``data.*.sources[].dataset``)."""
    aliases: tuple[str, ...]
    """The other names it answers to: its Hugging Face Hub ids (a source whose ``path`` is one reads through it)."""
    columns: tuple[tuple[str, ...], ...]
    """The column sets of its rows the builder reads (any one of them); the first is the hub data set's."""
    gives: Gives
    """What its rows become: prompts (GRPO), conversations (SFT; GRPO reads their last answer as ``answer``), ..."""
    build: Builder
    """The builder: a row with one of ``columns`` → a row in one of honing's formats."""
    reward: str | None = None
    """The reward (``grpo.rewards[].name``) that scores completions against the columns its rows carry."""
    subset: str | None = None
    """The hub configuration read when ``path`` is its hub id and the source names no ``subset``."""
    split: str | None = None
    """The hub split read when ``path`` is its hub id without ``:split``; None: ``train``."""
    description: str = ""
    """One line for the docs' table."""

    @property
    def names(self) -> tuple[str, ...]:
        """Every name it answers to, honing's first."""
        return (self.name, *self.aliases)

    def fits(self, row: Mapping[str, Any]) -> bool:
        """True when the row holds one of the data set's column sets."""
        return any(all(column in row for column in columns) for columns in self.columns)

    def shows(self) -> str:
        """Its name and hub ids, for a message: ``'countdown' (Jiayi-Pan/Countdown-Tasks-3to4)``."""
        hub = [alias for alias in self.aliases if "/" in alias]
        return repr(self.name) + (f" ({', '.join(hub)})" if hub else "")


def column(row: Mapping[str, Any], name: str, kind: type | tuple[type, ...] = str) -> Any:
    """``row[name]``, checked to be a ``kind``; a RowError naming the column otherwise."""
    if name not in row:
        raise RowError(f"missing column {name!r} (columns: {', '.join(map(repr, row)) or 'none'})")
    value = row[name]
    if not isinstance(value, kind) or isinstance(value, bool):
        shown = "null" if value is None else type(value).__name__
        raise RowError(f"column {name!r} is {shown}, expected {_kind_name(kind)}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)
