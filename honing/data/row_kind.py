"""What a fine-tuning method's data is: the one typed specification through which its rows are read, built, stored,
fitted to ``data.seq_len`` and batched (``honing.data.splits`` and ``honing.data.finetune_data`` take it).

Each kind lives with its data: chat rows (SFT) in ``data/chat``, image rows in ``data/vision``, preference pairs in
``data/preference``, prompts in ``data/prompts``. A kind holds what its rows are made with (tokenizer or processor,
chat template, the ``data`` section); nothing in ``data/`` asks a recipe for anything.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from honing.cache import content_hash
from honing.data.generated.tasks import is_generated, materialize
from honing.data.report import BadRowReport, DataReport
from honing.data.splits import RowTable, resolve_sources
from honing.data.tokenizer import tokenizer_fingerprint
from honing.errors import DataError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from honing.config.data_schema import DataSection

#: each source's ``(item, origin)`` pairs in file order
SourceItems = list[list[tuple[Any, str]]]


class RowKind(Protocol):
    """A method's rows: how they are read, built (and stored), then fitted and batched when used."""

    #: which columns its rows have (``honing.data.prepared_rows.COLUMNS``)
    method: str
    #: rows are stored cut at this many tokens (None: whole; fitted to ``data.seq_len`` when used)
    cut: int | None
    #: whether training batches are length-grouped
    group_by_length: bool

    def settings(self) -> dict[str, Any]:
        """Everything besides the sources that changes a row (part of the cache key; a prepared folder made with
        other settings is refused)."""

    def source_fields(self, sources: Sequence[Any]) -> list[dict[str, Any]]:
        """A split's configured sources as the fields its rows are read from (generated tasks written out)."""

    def stamps(self, fields: list[dict[str, Any]]) -> list[str]:
        """Files the rows name besides the sources' own (images), with sizes and times, for the cache key."""

    def read(self, fields: list[dict[str, Any]]) -> tuple[SourceItems, BadRowReport]:
        """Each source's items in file order, and the bad rows skipped while reading."""

    def build(self, items: list[Any]) -> list[dict[str, Any] | Exception]:
        """One row (its columns) per item, or the DataError that rejected it."""

    def fit(self, table: RowTable, indices: Sequence[int], split: str) -> tuple[Any, DataReport]:
        """The rows ``indices`` of ``table`` fitted to ``data.seq_len`` as training items, and the split's report
        (a rejected row fails here under ``data.bad_rows: fail``; none left is a DataError)."""

    def dataset(self, fitted: Any, report: DataReport) -> tuple[Any, Any]:
        """The dataset of fitted items and the collator of its batches (the report gets the row counts)."""


class TemplatedRows:
    """What the row kinds of chat methods share: a tokenizer and chat template, the ``data`` section, generated tasks
    written to the cache and read back as ``generated_format``, settings that start with the tokenizer and template."""

    generated_format = "conversation"

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        chat_template: str,
        data: DataSection,
        *,
        cache_dir: str,
        printer: Callable[[str], None] = print,
    ):
        self.tokenizer, self.chat_template, self.data = tokenizer, chat_template, data
        self.cache_dir, self.printer = cache_dir, printer

    def settings(self) -> dict[str, Any]:
        """The tokenizer and the chat template (a kind adds its own)."""
        return {"tokenizer": tokenizer_fingerprint(self.tokenizer), "chat_template": content_hash([self.chat_template])}

    def source_fields(self, sources: Sequence[Any]) -> list[dict[str, Any]]:
        """The sources' fields, generated tasks written to the cache."""
        generated, write = self.generated_tasks()
        return resolve_sources(
            sources, self.cache_dir, generated=generated, write_generated=write, generated_format=self.generated_format
        )

    def generated_tasks(self) -> tuple[Callable[[str], bool], Callable[[str, str], str]]:
        """Which paths name generated tasks, and what writes one to the cache (the example tasks by default)."""
        return is_generated, materialize

    def stamps(self, fields: list[dict[str, Any]]) -> list[str]:
        """Files the rows name besides the sources (none for text rows)."""
        return []


def build_each(items: Sequence[Any], build_one: Callable[[Any], dict[str, Any]]) -> list[dict[str, Any] | Exception]:
    """``build_one`` of each item, or the DataError that rejected it (kept in its place)."""
    rows: list[dict[str, Any] | Exception] = []
    for item in items:
        try:
            rows.append(build_one(item))
        except DataError as error:
            rows.append(error)
    return rows
