"""Vision sources read by a reader another layer registers for their format (``honing.extensions``), beside the
formats every fine-tuning source is read in: the extension point through which ``honing.interop`` reads other
systems' data layouts, with a config section of their own, without the core naming them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from honing import extensions
from honing.data.formats import Conversation
from honing.data.report import BadRowReport
from honing.data.row_reader import read_sources

if TYPE_CHECKING:
    from honing.config.schema import DataSection

Found = list[tuple[Conversation, str]]
Row = dict[str, object]


class SourceFormatReader(Protocol):
    """A registered reader of some source formats and the ``data`` options that shape their rows."""

    formats: tuple[str, ...]

    def read(self, source: Mapping[str, object], index: int, data: DataSection, report: BadRowReport) -> Found:
        """One source's ``(conversation, origin)`` pairs; bad rows fail or are counted in ``report``."""
        ...

    def check(self, data: DataSection) -> None:
        """Refuse its options when no source would read them (a ConfigError naming the key)."""
        ...

    def settings(self, data: DataSection) -> dict[str, object]:
        """What its rows depend on besides the sources (part of the rows' cache key); empty when nothing is set."""
        ...

    def transform_rows(
        self, rows: list[Row | Exception], data: DataSection, tokenizer: object
    ) -> list[Row | Exception]:
        """The built rows as its options change them (rows that are errors pass through)."""
        ...


def registered_readers() -> list[SourceFormatReader]:
    """Every registered reader once, in the order first registered."""
    readers: list[SourceFormatReader] = []
    for path in dict.fromkeys(extensions.SOURCE_FORMAT_READERS.values()):
        readers.append(extensions.load(path))  # type: ignore[arg-type]
    return readers


def reader_for(source_format: object) -> SourceFormatReader | None:
    """The registered reader of ``source_format``; None: read as every fine-tuning source is."""
    path = extensions.SOURCE_FORMAT_READERS.get(source_format) if isinstance(source_format, str) else None
    return None if path is None else extensions.load(path)  # type: ignore[return-value]


def read_vision_sources(fields: Sequence[Mapping[str, object]], data: DataSection) -> tuple[list[Found], BadRowReport]:
    """Each source's ``(conversation, origin)`` pairs in file order and the bad rows skipped: a source of a
    registered format through its reader, the others as every fine-tuning source is read."""
    readers = [reader_for(source.get("format")) for source in fields]
    others = [index for index, reader in enumerate(readers) if reader is None]
    found_others, report = read_sources([fields[index] for index in others], bad_rows=data.bad_rows)
    by_index = dict(zip(others, found_others))
    found: list[Found] = []
    for index, (source, reader) in enumerate(zip(fields, readers)):
        found.append(by_index[index] if reader is None else reader.read(source, index, data, report))
    return found, report
