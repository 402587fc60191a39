"""Oumi's conversation types (``oumi.core.types.conversation``) by its names: ``Conversation``, ``Message``,
``ContentItem`` are honing's own classes (``honing.data.example_types``), and ``Role`` / ``Type`` Oumi's enums,
whose members are the strings honing's classes hold (``Role.USER == "user"``)."""

from __future__ import annotations

import enum

from honing.data.example_types import ContentItem, Conversation, Message

__all__ = ["ContentItem", "Conversation", "Message", "Role", "Type"]


class Role(str, enum.Enum):
    """Oumi's ``Role``: who speaks a message."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"

    def __str__(self) -> str:
        return self.value


class Type(str, enum.Enum):
    """Oumi's ``Type``: what a ``ContentItem`` holds (Oumi's ``IMAGE_BINARY`` is honing's ``image_base64``)."""

    TEXT = "text"
    IMAGE_PATH = "image_path"
    IMAGE_URL = "image_url"
    IMAGE_BINARY = "image_base64"

    def __str__(self) -> str:
        return self.value
