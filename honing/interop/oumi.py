"""Oumi's conversation types (``oumi.core.types.conversation``) by its names: ``Conversation``, ``Message``,
``ContentItem`` are honing's own classes (``honing.data.example_types``), and ``Role`` / ``Type`` Oumi's enums,
whose members are the strings honing's classes hold (``Role.USER == "user"``); and its data sets
(``oumi.core.datasets``, ``oumi.datasets.grpo``, ``oumi.core.registry``): ``BaseExperimentalGrpoDataset``, Oumi's
GRPO data sets and ``register_dataset`` (``honing.interop.oumi_datasets``)."""

from __future__ import annotations

from honing.data.example_types import ContentItem, Conversation, Message
from honing.interop.oumi_datasets import (
    REGISTRY,
    BaseExperimentalGrpoDataset,
    BaseMapDataset,
    BerryBenchGrpoDataset,
    CountdownGrpoDataset,
    Gsm8kGrpoDataset,
    LetterCountGrpoDataset,
    TldrGrpoDataset,
    register_dataset,
)
from honing.train.common import StrEnum

__all__ = [
    "REGISTRY",
    "BaseExperimentalGrpoDataset",
    "BaseMapDataset",
    "BerryBenchGrpoDataset",
    "ContentItem",
    "Conversation",
    "CountdownGrpoDataset",
    "Gsm8kGrpoDataset",
    "LetterCountGrpoDataset",
    "Message",
    "Role",
    "TldrGrpoDataset",
    "Type",
    "register_dataset",
]


class Role(StrEnum):
    """Oumi's ``Role``: who speaks a message."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class Type(StrEnum):
    """Oumi's ``Type``: what a ``ContentItem`` holds (Oumi's ``IMAGE_BINARY`` is honing's ``image_base64``)."""

    TEXT = "text"
    IMAGE_PATH = "image_path"
    IMAGE_URL = "image_url"
    IMAGE_BINARY = "image_base64"
