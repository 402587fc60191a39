"""GRPO's row kind: prompts (conversations without their answer, or plain texts) rendered with the chat template's
generation prompt, with the row's other columns kept for the rewards; a prompt that leaves no room for a completion
of ``max_completion_length`` tokens within ``data.seq_len`` is dropped when the rows are used."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from honing.data.prepared_rows import REJECTED
from honing.data.prompts.prompts import Prompt, PromptCollator, PromptDataset, read_prompt_sources
from honing.data.row_kind import TemplatedRows, build_each
from honing.data.row_reader import BadRowReport
from honing.data.splits import RowTable
from honing.errors import DataError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from honing.config.data_schema import DataSection


class PromptRows(TemplatedRows):
    """Prompts → their token ids (stored whole) → those that leave room for a completion → left-padded batches."""

    method = "grpo"
    cut = None
    group_by_length = False

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        chat_template: str,
        data: DataSection,
        *,
        max_completion_length: int,
        num_generations: int,
        tools: list[dict[str, Any]] | None = None,
        **where: Any,
    ):
        super().__init__(tokenizer, chat_template, data, **where)
        self.max_completion_length, self.num_generations = max_completion_length, num_generations
        self.tools = tools or None  # the run's tools' JSON schemas, shown with prompts whose row has no ``tools``

    def settings(self) -> dict[str, Any]:
        """The tokenizer, the chat template and the tools shown with the prompts."""
        settings = super().settings()
        if self.data.chat_template_kwargs:  # absent when unset: earlier runs' prepared rows stay valid
            settings["chat_template_kwargs"] = json.dumps(self.data.chat_template_kwargs, sort_keys=True)
        return {**settings, "tools": json.dumps(self.tools, sort_keys=True)} if self.tools else settings

    def read(self, fields: list[dict[str, Any]]) -> tuple[list[list[tuple[Any, str]]], BadRowReport]:
        """Each source's prompts and origins in file order (a bad row fails: GRPO has no data.bad_rows)."""
        return read_prompt_sources(fields), BadRowReport()

    def prompt_ids(self, prompt: Prompt) -> list[int]:
        """The prompt's tokens: messages rendered with the chat template's generation prompt, or the text as is."""
        text = prompt.prompt
        if prompt.is_conversational:
            text = self.tokenizer.apply_chat_template(
                prompt.prompt,
                tools=self.tools_of(prompt),
                tokenize=False,
                add_generation_prompt=True,
                **self.data.chat_template_kwargs,
            )
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def tools_of(self, prompt: Prompt) -> list[dict[str, Any]] | None:
        """The tools shown with a prompt: its row's ``tools`` column (JSON schemas), else the run's tools."""
        tools = prompt.columns.get("tools")
        if isinstance(tools, str):  # some hub sets store the schemas as one JSON string
            tools = json.loads(tools)
        return tools or self.tools

    def build(self, items: list[Any]) -> list[dict[str, Any] | Exception]:
        """Each prompt's token ids, the prompt itself and the columns its rewards read."""
        return build_each(items, self.build_one)

    def build_one(self, prompt: Prompt) -> dict[str, Any]:
        """One prompt's row (DataError: a column prepared rows cannot keep)."""
        if self.data.cache_rows:
            check_json_columns(prompt)
        return {"prompt_ids": self.prompt_ids(prompt), "prompt": prompt.prompt, "columns": prompt.columns}

    def fit(
        self, table: RowTable, indices: Sequence[int], split: str
    ) -> tuple[tuple[list[Prompt], list[list[int]]], None]:
        """The prompts ``indices`` of ``table`` that leave ``max_completion_length`` tokens of ``data.seq_len``, and
        their token ids; no data report (the reward is logged every step)."""
        room = self.data.seq_len - self.max_completion_length
        kept, token_ids, dropped = [], [], 0
        for index in indices:
            row = table.row(index)
            if row["status"] == REJECTED:
                raise DataError(f"{row['origin']}: {row['reason']}")
            if len(row["prompt_ids"]) > room:
                dropped += 1
                continue
            kept.append(self.fitted_prompt(row))
            token_ids.append(row["prompt_ids"])
        if not kept:
            raise DataError(
                f"no prompt fits in data.seq_len ({self.data.seq_len}) minus grpo.max_completion_length "
                f"({self.max_completion_length}); raise data.seq_len"
            )
        self.printer(
            f"{split}: {len(kept):,} prompts"
            + (f" ({dropped:,} longer than {room} tokens dropped)" if dropped else "")
            + (f", {self.num_generations} completions each per step" if split == "train" else "")
        )
        return (kept, token_ids), None

    def fitted_prompt(self, row: Mapping[str, Any]) -> Prompt:
        """The prompt of a built row (its text or messages and its columns)."""
        return Prompt(row["prompt"], row["columns"])

    def dataset(
        self, fitted: tuple[list[Prompt], list[list[int]]], report: None
    ) -> tuple[PromptDataset, PromptCollator]:
        """The prompts with their token ids, left-padded for generation by the prompt collator."""
        return PromptDataset(*fitted), PromptCollator(self.tokenizer.pad_token_id)


def check_json_columns(prompt: Prompt) -> None:
    """A DataError naming a column that prepared rows cannot keep as it is (JSON values only)."""
    for name, value in prompt.columns.items():
        try:
            same = json.loads(json.dumps(value)) == value
        except (TypeError, ValueError):
            same = False
        if not same:
            raise DataError(
                f"column {name!r} holds a {type(value).__name__} that prepared rows cannot keep as it is (JSON "
                "values only); convert it, or set data.cache_rows: false"
            )
