"""Prompts for reinforcement learning: rows in, prompts (a conversation without its answer, or a plain text) with
the row's other columns kept for the rewards, and a collator that left-pads them for generation.

Row formats: ``prompt`` (TRL's prompt-only rows: ``{"prompt": "text" | [messages], ...columns}``) and
``conversation`` (``{"messages": [...], ...}``: a last assistant turn is removed and its text kept as the column
``answer``, so an SFT set is also a prompt set with reference answers). ``auto`` picks by the keys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from honing.data.collate import Collator, padded_rows
from honing.data.formats import RowError, _messages
from honing.data.named.registry import suggested_datasets
from honing.data.row_reader import RowItems, SourceKind, named_format, read_items, weighted_items
from honing.errors import DataError

PROMPT_FORMATS = ("auto", "prompt", "conversation")
#: the collated keys that are not dataset columns
PROMPT_BATCH_KEYS = ("input_ids", "attention_mask", "index", "prompt", "columns")


@dataclass
class Prompt:
    """A prompt (a text, or chat messages as ``{"role", "content"}`` dicts) and its row's other columns."""

    prompt: str | list[dict[str, str]]
    columns: dict[str, Any] = field(default_factory=dict)

    @property
    def is_conversational(self) -> bool:
        """True for chat messages (rendered with the chat template's generation prompt)."""
        return isinstance(self.prompt, list)


def detect_prompt_format(row: Mapping[str, Any]) -> str:
    """``prompt`` or ``conversation`` by the row's keys; a ``RowError`` naming them otherwise."""
    if "prompt" in row:
        return "prompt"
    if "messages" in row:
        return "conversation"
    raise RowError(
        f"cannot detect a prompt format from the keys {', '.join(map(repr, row))}; expected 'prompt' (a text or "
        "a list of messages) or 'messages' (a conversation, its last assistant turn removed)" + suggested_datasets(row)
    )


def to_prompt(row: Mapping[str, Any], format: str) -> Prompt:
    """The prompt a row holds in ``format`` (``prompt`` or ``conversation``), its other keys as columns."""
    if format == "prompt":
        if "prompt" not in row:
            raise RowError(f"missing key 'prompt' (found {', '.join(map(repr, row)) or 'no keys'})")
        value = row["prompt"]
        columns = {key: item for key, item in row.items() if key != "prompt"}
        if isinstance(value, str):
            if not value:
                raise RowError("'prompt' is an empty string")
            return Prompt(value, columns)
        if isinstance(value, list):
            return Prompt(_plain_messages(value, "prompt"), columns)
        raise RowError(f"'prompt' must be a string or a list of messages, got {type(value).__name__}")
    if format == "conversation":
        if "messages" not in row:
            raise RowError(f"missing key 'messages' (found {', '.join(map(repr, row))})")
        messages = _plain_messages(row["messages"], "messages")
        columns = {key: item for key, item in row.items() if key not in ("messages", "metadata")}
        metadata = row.get("metadata") or {}
        if isinstance(metadata, Mapping):
            columns = {**metadata, **columns}
        if messages[-1]["role"] == "assistant":
            columns.setdefault("answer", messages[-1]["content"])
            messages = messages[:-1]
        if not messages:
            raise RowError("the conversation holds only an assistant turn; a prompt needs a message before it")
        return Prompt(messages, columns)
    raise DataError(f"unknown prompt format {format!r}; expected one of: {', '.join(PROMPT_FORMATS)}")


def _plain_messages(value: object, key: str) -> list[dict[str, str]]:
    messages = _messages(value, key)
    if not messages:
        raise RowError(f"{key!r} is an empty list; expected at least one message")
    for index, message in enumerate(messages):
        if message.images():
            raise RowError(f"{key}[{index}] has image content; GRPO prompts are text only")
    return [message.to_hf() for message in messages]


def _prompt_items(fields: dict[str, Any], index: int) -> RowItems[Prompt]:
    """A source's row → its prompt, in the source's format or (``auto``) the format the row's own keys announce."""
    format = named_format(fields, index, PROMPT_FORMATS, "prompts")
    return lambda record: [to_prompt(record.row, format or detect_prompt_format(record.row))]


#: GRPO's text prompts, from prompt rows or conversations
PROMPTS = SourceKind("prompts", ("prompts", "conversations"), _prompt_items)


def read_prompt_sources(sources: Sequence[Mapping[str, Any] | object]) -> list[list[tuple[Prompt, str]]]:
    """Each source's ``(prompt, origin)`` once, in file order (at most ``max_samples``); a bad row fails with its
    ``file:line``. Weights are not applied (``load_prompts`` and prepared rows apply them)."""
    return read_items(sources, PROMPTS, bad_rows=None)[0]


def load_prompts(sources: Sequence[Mapping[str, Any] | object], *, seed: int = 0) -> list[tuple[Prompt, str]]:
    """``(prompt, origin)`` for every row of every source, repeated by the sources' weights; a bad row fails
    with its ``file:line``."""
    return weighted_items(sources, read_prompt_sources(sources), seed=seed)


class PromptDataset(torch.utils.data.Dataset):
    """Tokenized prompts: each item its ``input_ids``, the prompt itself, its columns and its index."""

    def __init__(self, prompts: Sequence[Prompt], token_ids: Sequence[Sequence[int]]):
        self.prompts = list(prompts)
        self.token_ids = [list(ids) for ids in token_ids]
        self.lengths = [len(ids) for ids in self.token_ids]

    def __len__(self) -> int:
        return len(self.prompts)

    def __getitem__(self, index: int) -> dict[str, Any]:
        item = self.prompts[index]
        return {"input_ids": self.token_ids[index], "index": index, "prompt": item.prompt, "columns": item.columns}


class PromptCollator(Collator):
    """Left-pads prompts (generation appends on the right), keeps each row's prompt and its columns as lists
    (``columns``: name → one value per prompt), and splits a batch by prompt."""

    model_input_keys = ("input_ids", "attention_mask")

    def __init__(self, pad_token_id: int | None):
        if pad_token_id is None or int(pad_token_id) < 0:
            raise DataError(f"pad_token_id is {pad_token_id!r}; prompts are left-padded and need a pad token id >= 0")
        self.pad_token_id = int(pad_token_id)

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        input_ids, attention_mask = padded_rows([item["input_ids"] for item in items], self.pad_token_id, left=True)
        names = sorted({name for item in items for name in item["columns"]})
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "index": torch.tensor([int(item["index"]) for item in items]),
            "prompt": [item["prompt"] for item in items],
            "columns": {name: [item["columns"].get(name) for item in items] for name in names},
        }

    def split(self, batch: Mapping[str, Any], rows_per_micro_batch: int) -> list[dict[str, Any]]:
        """The batch cut into groups of at most ``rows_per_micro_batch`` prompts, lists and columns included."""
        rows = self.num_rows(batch)
        size = max(1, min(rows_per_micro_batch, rows))
        return [_rows(batch, slice(start, start + size)) for start in range(0, rows, size)]

    def num_tokens(self, batch: Mapping[str, Any]) -> int:
        """Prompt tokens in the batch (GRPO adds the generated ones)."""
        return int(batch["attention_mask"].sum().item())

    def filler(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """The batch marked ``filler``: still generated from (FSDP2), scored as nothing (``Collator.filler``)."""
        return {**batch, "filler": True}


def _rows(batch: Mapping[str, Any], rows: slice) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in batch.items():
        if key == "columns":
            out[key] = {name: values[rows] for name, values in value.items()}
        else:
            out[key] = value[rows]
    return out
