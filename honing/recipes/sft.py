"""Supervised fine-tuning: conversations in, loss on the assistant's tokens, full or LoRA.

Parts: a chat tokenizer, the chat row kind (``honing.data.chat.chat_rows.ChatRows``: packed or padded rows),
the next-token train module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from honing.data.chat.chat_rows import ChatRows
from honing.data.formats import Conversation
from honing.data.row_reader import load_examples
from honing.recipes.base import Recipe, chat_assets, chat_packed_collate, chat_rows
from honing.run.parts import HeldOutAnswers, ModelAssets

if TYPE_CHECKING:
    from honing.config import RunConfig
    from honing.data.row_kind import RowKind


class SFTRecipe(Recipe):
    """Chat data → chat template with assistant-only labels → packed (or padded) rows → next-token loss."""

    def packed_rows(self) -> bool:
        """Rows hold several examples apart with ``data.packing``."""
        return self.config.data.packing

    def model_assets(self) -> ModelAssets:
        """A byte-level or pretrained tokenizer with the run's chat template (and its special tokens)."""
        return chat_assets(self.config)

    def row_kind(self, assets: ModelAssets) -> ChatRows:
        """Conversations tokenized with the chat template, assistant-only labels."""
        return chat_rows(ChatRows, assets, self.config, self.cache_dir, packed_collate=chat_packed_collate(self.models))

    def held_out_answers(self, assets: ModelAssets) -> HeldOutAnswers:
        """The validation conversations as (messages before the last assistant turn, that turn's text)."""
        # image rows were refused or skipped as bad rows while tokenizing: text SFT cannot answer them
        examples = validation_examples(self.row_kind(assets), self.config)
        held_out = [example for example in examples if isinstance(example, Conversation) and not example.images()]
        return [item for item in map(prompt_and_answer, held_out) if item is not None]


def validation_examples(kind: RowKind, config: RunConfig) -> list[Any]:
    """The validation examples as read (its own sources, or the held-out part of the training sources)."""
    from honing.data.text.corpus import split_documents

    data, seed = config.data, config.trainer.seed
    if data.validation is not None:
        return list(
            load_examples(kind.source_fields(data.validation.sources), seed=seed, bad_rows=data.bad_rows).examples
        )
    if data.validation_split <= 0:
        return []
    train = load_examples(kind.source_fields(data.train.sources), seed=seed, bad_rows=data.bad_rows)
    _, held_out = split_documents(list(zip(train.examples, train.origins)), data.validation_split, seed=seed)
    return [example for example, _ in held_out]


def prompt_and_answer(conversation: Conversation) -> tuple[list[dict[str, Any]], str] | None:
    """The messages before the last assistant turn, and that turn's text."""
    messages = conversation.to_hf_messages()
    if not messages or messages[-1]["role"] != "assistant":
        return None
    return messages[:-1], messages[-1]["content"]
