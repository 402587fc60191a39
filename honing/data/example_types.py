"""The typed training examples every row format converts to: Oumi's ``Conversation`` of ``Message`` turns (text,
image and PDF-page ``ContentItem`` parts, tool calls) and ``PlainText``; and ``RowError``, a row that fits no type."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from honing.errors import DataError

ROLES = ("system", "user", "assistant", "tool")
IMAGE_TYPES = ("image_url", "image_path", "image_base64", "pdf")


class RowError(DataError):
    """A row that does not fit its format; the message is the reason, and the caller prefixes file:line."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class ContentItem(BaseModel):
    """One part of a message: text, an image given by URL, path or base64 data, or a page of a PDF file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["text", "image_url", "image_path", "image_base64", "pdf"]
    content: str
    page: int | None = None  # pdf only: the page to render, 1-based as in pdftoppm and olmOCR (default 1)

    @model_validator(mode="before")
    @classmethod
    def _first_page_by_default(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("type") == "pdf" and data.get("page") is None:
            return {**data, "page": 1}
        return data

    @model_validator(mode="after")
    def _page_fits_type(self) -> ContentItem:
        if self.type == "pdf" and self.page < 1:
            raise ValueError(f"page of a pdf item is 1-based, got {self.page}")
        if self.type != "pdf" and self.page is not None:
            raise ValueError(f"page applies to pdf items only, not to a {self.type} item")
        return self

    @property
    def is_image(self) -> bool:
        """True for the image types."""
        return self.type in IMAGE_TYPES


class Message(BaseModel):
    """One turn of a conversation: a role and its content (a string, or a list of text and image items)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[ContentItem]
    tool_calls: list[dict[str, Any]] | None = None  # an assistant turn's calls, as transformers' chat templates take
    name: str | None = None  # a tool turn's tool name (templates that name it, e.g. gpt-oss)

    def text(self, separator: str = " ") -> str:
        """The message's text: the string content, or its text items joined by ``separator`` (as Oumi does)."""
        if isinstance(self.content, str):
            return self.content
        return separator.join(item.content for item in self.content if item.type == "text")

    def to_hf(self) -> dict[str, Any]:
        """``{"role", "content": str}`` with the tool calls and the tool's name where the turn has them."""
        message: dict[str, Any] = {"role": self.role, "content": self.text()}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        if self.name is not None:
            message["name"] = self.name
        return message

    def items(self) -> list[ContentItem]:
        """The content as a list of items (a string content is one text item)."""
        return [ContentItem(type="text", content=self.content)] if isinstance(self.content, str) else self.content

    def images(self) -> list[ContentItem]:
        """The message's image items, in order."""
        return [] if isinstance(self.content, str) else [item for item in self.content if item.is_image]


class Conversation(BaseModel):
    """A list of messages (at least one) plus free-form metadata, as in Oumi."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    messages: list[Message]
    metadata: dict[str, Any] = Field(default_factory=dict)
    tools: list[dict[str, Any]] | None = None  # JSON schemas of the tools the conversation may call

    @field_validator("messages")
    @classmethod
    def _not_empty(cls, messages: list[Message]) -> list[Message]:
        if not messages:
            raise ValueError("a conversation needs at least one message, got an empty list")
        return messages

    def to_hf_messages(self) -> list[dict[str, str]]:
        """``[{"role": ..., "content": str}]`` for ``apply_chat_template`` in text-only training.

        A conversation with image items is a ``DataError`` rather than silently trained as text: its answers
        would be learned without the images they describe. The caller prefixes the row's origin (file:line).
        """
        for index, message in enumerate(self.messages):
            images = message.images()
            if images:
                raise DataError(
                    f"row has image content ({images[0].type} in messages[{index}]); text SFT cannot "
                    "train on images: use method: vl_sft (vision-language SFT)"
                )
        return [message.to_hf() for message in self.messages]

    def to_vl_messages(self) -> tuple[list[dict[str, Any]], list[ContentItem]]:
        """HF messages for a processor's chat template, and the image items in the order their slots appear.

        Every content becomes a list of ``{"type": "text", "text": ...}`` and ``{"type": "image"}`` parts (the
        form image-text-to-text templates take); the caller loads the images (``honing.data.vision.images``) in order.
        """
        messages: list[dict[str, Any]] = []
        for message in self.messages:
            parts = [
                {"type": "text", "text": item.content} if item.type == "text" else {"type": "image"}
                for item in message.items()
            ]
            messages.append({"role": message.role, "content": parts})
        return messages, self.images()

    def images(self) -> list[ContentItem]:
        """Every image item of every message, in conversation order."""
        return [image for message in self.messages for image in message.images()]

    def has_assistant(self) -> bool:
        """True when at least one message is from the assistant."""
        return any(message.role == "assistant" for message in self.messages)


class PlainText(BaseModel):
    """A text row trained on every token, as in pretraining."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str


Example = Conversation | PlainText
